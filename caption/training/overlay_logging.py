"""Where the model looks, while it trains: the overlays and captions of a few fixed validation images in the
logger after every validation.

    caption fit --config shapes_soft --trainer.callbacks+=caption.training.overlay_logging.AttentionImages \
        --trainer.callbacks.num_images 8

The images are the first `num_images` of the validation split, the same at every validation, captioned greedily and
drawn as `caption describe` draws them (`caption.evaluation.overlays`). TensorBoard, CSV, Weights & Biases and MLflow
loggers each get them their own way; a logger that takes no images is left out, with one line that says so. What
each logger gets: docs/attention.md#from-the-command-line.
"""

import csv
import io
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from PIL import Image

from caption.errors import CaptionError, ConfigError
from caption.evaluation.overlays import Overlay, overlay_figure, to_uint8
from caption.io.outputs import save_figure, write_text
from caption.model.captions import Caption


class AttentionImages(Callback):
    """Logs the attention overlays and captions of a few fixed validation images after every validation.

    Args:
        num_images: how many validation images (the first ones of the split, the same every time).
        columns: panels per row of each figure (the image, then one per word).
    """

    def __init__(self, num_images: int = 4, columns: int = 6):
        super().__init__()
        if num_images < 1 or columns < 2:
            raise ConfigError(f"AttentionImages needs num_images >= 1 and columns >= 2, got {num_images}, {columns}")
        self.num_images = num_images
        self.columns = columns
        self._images: tuple[list[int], torch.Tensor] | None = None  # (image ids, their encoder inputs (N, 3, H, W))
        self._skipped: set[str] = set()  # loggers already said to take no images

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not trainer.loggers:
            return
        image_ids, pixels = self.images(trainer)
        if not image_ids:
            return
        with torch.no_grad():
            annotations = pl_module.model.annotations({"image": pixels.to(pl_module.device)})
            captions = pl_module.model.generate(annotations, beam_size=1).captions(pl_module.model.vocabulary)
        normalization = trainer.datamodule.source.normalization
        overlays = [Overlay(to_uint8(image, *normalization), caption.words, caption.alpha, caption.beta,
                            caption.locations, title=caption.text, label=f"image {image_id}",
                            context=pl_module.model.settings.decoding.hard_eval_context)
                    for image_id, image, caption in zip(image_ids, pixels, captions)]
        for logger in trainer.loggers:
            self.log_to(logger, trainer, image_ids, overlays, captions)

    def images(self, trainer: L.Trainer) -> tuple[list[int], torch.Tensor]:
        """The first `num_images` usable validation images (ids, encoder inputs), read once."""
        if self._images is None:
            data = trainer.datamodule
            records = data.usable("val")[:self.num_images]
            try:
                self._images = [record.image_id for record in records], torch.stack(
                    [data.source.image(record) for record in records])
            except CaptionError as error:  # e.g. training from a feature cache whose images are not on this machine
                rank_zero_warn(f"AttentionImages: cannot read the validation images ({error}); no overlays logged")
                self._images = [], torch.empty(0)
        return self._images

    def log_to(self, logger: Logger, trainer: L.Trainer, image_ids: list[int], overlays: list[Overlay],
               captions: list[Caption]) -> None:
        step, epoch = trainer.global_step, trainer.current_epoch
        if isinstance(logger, TensorBoardLogger):
            for image_id, overlay, caption in zip(image_ids, overlays, captions):
                pixels = rendered(overlay_figure(overlay, columns=self.columns))
                logger.experiment.add_image(f"attention/{image_id}", pixels, step, dataformats="HWC")
                logger.experiment.add_text(f"caption/{image_id}", caption.text or "(empty)", step)
        elif isinstance(logger, CSVLogger):
            folder = Path(logger.log_dir) / "attention"
            folder.mkdir(parents=True, exist_ok=True)
            for image_id, overlay in zip(image_ids, overlays):
                save_figure(overlay_figure(overlay, columns=self.columns), folder / f"step{step}-image{image_id}.png")
            append_rows(folder / "captions.csv", caption_rows(step, epoch, image_ids, captions))
        elif isinstance(logger, WandbLogger):
            images = [rendered(overlay_figure(overlay, columns=self.columns)) for overlay in overlays]
            labels = [f"image {image_id}: {caption.text}" for image_id, caption in zip(image_ids, captions)]
            logger.log_image(key="attention", images=images, step=step, caption=labels)
        elif isinstance(logger, MLFlowLogger):
            client, run_id = logger.experiment, logger.run_id
            for image_id, overlay in zip(image_ids, overlays):
                client.log_figure(run_id, overlay_figure(overlay, columns=self.columns),
                                  f"attention/step{step}-image{image_id}.png")
            client.log_text(run_id, csv_text(caption_rows(step, epoch, image_ids, captions)),
                            f"attention/step{step}-captions.csv")
        elif type(logger).__name__ not in self._skipped:
            self._skipped.add(type(logger).__name__)
            rank_zero_info(f"AttentionImages: {type(logger).__name__} takes no images (TensorBoardLogger, CSVLogger, "
                           "WandbLogger and MLFlowLogger do); its overlays are left out")


def caption_rows(step: int, epoch: int, image_ids: list[int], captions: list[Caption]) -> list[dict[str, Any]]:
    """One row per image: step, epoch, image_id, caption."""
    return [{"step": step, "epoch": epoch, "image_id": image_id, "caption": caption.text}
            for image_id, caption in zip(image_ids, captions)]


def csv_text(rows: list[dict[str, Any]]) -> str:
    """`rows` as CSV text, with a header line."""
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return table.getvalue()


def rendered(figure: Any) -> np.ndarray:
    """A matplotlib figure as an RGB array (H, W, 3) uint8."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    return np.asarray(Image.open(buffer).convert("RGB"))


def append_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """`rows` added to the CSV file at `path` (a header line first when the file is new), the file rewritten whole
    with `write_text`: never through a link planted at its name, never cut short by a full disk."""
    table = csv_text(rows)
    if path.is_file() and not path.is_symlink():  # this run's earlier rows: keep them, without a second header
        table = path.read_text(encoding="utf-8") + table.partition("\n")[2]
    write_text(path, table)
