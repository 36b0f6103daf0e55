"""`caption predict`: caption a folder of images or a split with Lightning, into COCO-results JSON.

    caption predict --ckpt_path runs/shapes_soft/checkpoints/last.ckpt --data.predict photos/ --predictions.out preds
    caption predict --ckpt_path CKPT --data.predict test --trainer.devices 4 --trainer.strategy ddp

LightningCLI's own `predict`: the model's `predict_step` decodes each batch with the checkpoint's
decoding settings (`--model.decoding.beam_size` and friends override them), and `CaptionWriter` gathers the
captions of every rank and writes DIR/captions.json once: [{"image_id", "caption"}] for a split, as
`caption evaluate` writes it, or [{"file_name", "caption"}] for image files. Without `--config` the
data settings are the checkpoint's, and the vocabulary is always the checkpoint's
(`data.vocabulary_from`), so neither the training data nor its config need be on this machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info

from caption.decoding import Caption
from caption.evaluation import gather_by_image
from caption.outputs import writable_folder, write_text


class CaptionWriter(BasePredictionWriter):
    """Writes every rank's captions, de-duplicated, to DIR/captions.json at the end of `caption predict`.

    Args:
        out: the folder for captions.json (created and checked writable before any image is captioned).
    """

    def __init__(self, out: str = "runs/predict") -> None:
        super().__init__(write_interval="batch")
        self.out = Path(out)
        self._captions: dict[int | str, str] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.is_global_zero:
            writable_folder(self.out, what="predictions.out")

    def write_on_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: list[tuple[int | str, Caption]],
        batch_indices: Any, batch: Any, batch_idx: int, dataloader_idx: int,
    ) -> None:
        self._captions.update((key, caption.text) for key, caption in prediction)

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        captions = gather_by_image(self._captions, world_size=trainer.world_size)  # every rank captioned a share
        self._captions = {}
        if trainer.is_global_zero:
            path = self.out / "captions.json"
            write_text(path, json.dumps(results(captions), indent=1) + "\n")
            rank_zero_info(f"wrote {len(captions)} captions to {path}")


def results(captions: dict[int | str, str]) -> list[dict[str, Any]]:
    """COCO results entries, sorted: {"image_id", "caption"} for dataset images, {"file_name", "caption"} for files."""
    key = "file_name" if captions and isinstance(next(iter(captions)), str) else "image_id"
    return [{key: name, "caption": text} for name, text in sorted(captions.items())]
