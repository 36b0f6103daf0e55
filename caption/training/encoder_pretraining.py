"""The encoder pretrained elsewhere (sec. 3.1.1, "a CNN pretrained on ImageNet"), for data that has labels but no
ImageNet-like CNN: the configured encoder trained as a classifier of the data's labelled objects, then taken by
`model.encoder.weights` and kept frozen by the captioner, as the paper keeps its VGG.

Notation: B images, L = rows·columns annotation cells, D channels, C categories (+ 1: the background, class 0).

    a = encoder(image)                       # (B, L, D), the captioner's annotations, unchanged
    s = W a + b                              # (B, L, C + 1), one linear classifier shared by every cell
    loss = CE(s_i, y_i) over object cells + background_weight · CE(s_i, 0) over the others (each a mean)

y_i is the category of the object whose box holds cell i (`caption.data.labelled_objects.cell_labels`). An object
is classified by the mean of s over its cells, among the C categories: that is the accuracy and confusion reported.
Only the encoder is kept (`encoder_state`); the classifier head is dropped, so the captioner sees the same grid.

    caption pretrain-encoder --config shapes_encoder     # runs/shapes_encoder/encoder.pt (README "Quick start")
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from caption.data.labelled_objects import BACKGROUND
from caption.model.precision import at_least_float32
from caption.training.pretraining_settings import PretrainingSettings


def cell_loss(logits: Tensor, cells: Tensor, *, background_weight: float) -> Tensor:
    """The mean cross-entropy of the object cells, plus `background_weight` times that of the background cells.
    logits (B, L, C + 1), cells (B, L) classes."""
    losses = F.cross_entropy(logits.flatten(0, 1), cells.flatten(), reduction="none")  # (B·L,)
    objects = cells.flatten() != BACKGROUND  # (B·L,)
    loss = losses[objects].mean() if objects.any() else losses.sum() * 0
    if background_weight and not objects.all():
        loss = loss + background_weight * losses[~objects].mean()
    return loss


def object_predictions(logits: Tensor, *, object_image: Tensor, object_cells: Tensor) -> Tensor:
    """(M,) the category class (1..C) of each object: the argmax of its cells' mean scores, background excluded.
    logits (B, L, C + 1); object_image (M,) its image; object_cells (M, L) its cells."""
    cells = object_cells.to(logits.dtype)  # (M, L)
    scores = (cells[:, :, None] * logits[object_image]).sum(1) / cells.sum(1, keepdim=True).clamp(min=1)  # (M, C + 1)
    return scores[:, 1:].argmax(dim=1) + 1  # (M,)


class EncoderClassifier(L.LightningModule):
    """The encoder with a linear classifier on each annotation (see the module's notation).

    Args:
        encoder: the captioner's encoder, built trainable (`caption.model.encoder.build_encoder`).
        categories: the labels, class k + 1 being categories[k].
        settings: the optimisation (`PretrainingSettings`).
    """

    def __init__(self, *, encoder: nn.Module, categories: list[str], settings: PretrainingSettings):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.dim, len(categories) + 1)
        self.categories = list(categories)
        self.settings = settings
        self.confusion = torch.zeros(len(categories), len(categories), dtype=torch.long)  # this validation's
        self.history: list[dict[str, Any]] = []  # per validation: epoch, accuracy, confusion (rows: true)
        self.best_state: dict[str, Tensor] | None = None  # the encoder at the best validation accuracy so far

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 3, H, W) -> class scores of every cell (B, L, C + 1), fp32 under bf16 autocast (the loss's)."""
        return at_least_float32(self.head(self.encoder(images)))  # (B, L, D) -> (B, L, C + 1)

    def training_step(self, batch: dict[str, Tensor], batch_index: int) -> Tensor:
        loss = cell_loss(self(batch["image"]), batch["cells"], background_weight=self.settings.background_weight)
        self.log("loss", loss, prog_bar=True, batch_size=batch["image"].shape[0])
        return loss

    def on_validation_epoch_start(self) -> None:
        self.confusion.zero_()

    def validation_step(self, batch: dict[str, Tensor], batch_index: int) -> None:
        predicted = object_predictions(self(batch["image"]), object_image=batch["object_image"],
                                       object_cells=batch["object_cells"])  # (M,)
        truth = batch["object_labels"]  # (M,)
        self.confusion.index_put_((truth.cpu() - 1, predicted.cpu() - 1), torch.ones_like(truth.cpu()),
                                  accumulate=True)

    def on_validation_epoch_end(self) -> None:
        accuracy = float(self.confusion.diag().sum() / self.confusion.sum().clamp(min=1))
        self.log("val/accuracy", accuracy, prog_bar=True)
        if self.trainer.sanity_checking:
            return
        if not self.history or accuracy >= max(entry["accuracy"] for entry in self.history):
            self.best_state = encoder_state(self.encoder)
        self.history.append({"epoch": self.current_epoch, "accuracy": accuracy, "confusion": self.confusion.tolist()})

    @property
    def best(self) -> dict[str, Any]:
        """The validation of the best accuracy (the last of equals: the most trained): epoch, accuracy, confusion."""
        return max(reversed(self.history), key=lambda entry: entry["accuracy"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.settings.learning_rate)


def encoder_state(encoder: nn.Module) -> dict[str, Tensor]:
    """The encoder's weights as `model.encoder.weights` reads them: its own state dict, which for the torchvision
    encoders has torchvision's keys (`features.0.weight`, `layer4.0.conv1.weight`)."""
    return {key: value.detach().cpu().clone() for key, value in encoder.state_dict().items()}


def confusion_table(confusion: list[list[int]], categories: list[str]) -> str:
    """The confusion between categories as text: a row per true category, a column per predicted one, and each row's
    accuracy."""
    width = max(6, *(len(name) for name in categories))
    lines = [" " * width + " " + " ".join(f"{name[:width]:>{width}}" for name in categories) + "  accuracy"]
    for name, row in zip(categories, confusion):
        total = sum(row)
        share = f"{row[categories.index(name)] / total:.3f}" if total else "–"
        lines.append(f"{name:>{width}} " + " ".join(f"{count:>{width}}" for count in row) + f"  {share:>8}")
    return "\n".join(lines)
