"""`caption predict`: caption a folder of images or a split with Lightning, into COCO-results JSON and CSV.

    caption predict --ckpt_path runs/shapes_soft/checkpoints/last.ckpt --data.predict photos/ --predictions.out preds
    caption predict --ckpt_path CKPT --data.predict photos/ --predictions.num_captions 3
    caption predict --ckpt_path CKPT --data.predict test --trainer.devices 4 --trainer.strategy ddp

LightningCLI's own `predict`: the model's `predict_step` decodes each batch with the checkpoint's
decoding settings (`--model.decoding.beam_size` and friends override them), and `CaptionWriter` gathers the
captions of every rank and writes DIR/captions.json and DIR/captions.csv once, in the one result format of
`caption evaluate` and `caption describe` (`caption.evaluation.results`): image_id (the dataset's for a split, the
file's position for image files), caption, file_name, log_prob, and with `--predictions.num_captions` n > 1 the n best.
When not one image could be read, it writes nothing and says so. Without `--config` the data settings are the
checkpoint's, and the vocabulary is always the checkpoint's (`data.vocabulary_from`), so neither the training data
nor its config need be on this machine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info

from caption.data.datamodule import SPLITS
from caption.errors import CaptionError, ConfigError
from caption.evaluation.results import Result, write_results
from caption.evaluation.scoring import gather_by_image
from caption.io.outputs import writable_folder


class CaptionWriter(BasePredictionWriter):
    """The captions of `caption predict`, every rank's, de-duplicated, written to DIR/captions.json and captions.csv.

    Args:
        out: the folder for captions.json and captions.csv (created and checked writable before any image is
            captioned).
        num_captions: captions per image: 1, or the n best beams, best first (the beam is then at least n wide).
    """

    def __init__(self, out: str = "runs/predict", num_captions: int = 1) -> None:
        super().__init__(write_interval="batch")
        if num_captions < 1:
            raise ConfigError(f"predictions.num_captions must be >= 1, got {num_captions}")
        self.out = Path(out)
        self.num_captions = num_captions
        self._results: dict[int, Result] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.is_global_zero:
            writable_folder(self.out, what="predictions.out")
        pl_module.predict_num_captions = self.num_captions

    def write_on_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: list[Result],
        batch_indices: Any, batch: Any, batch_idx: int, dataloader_idx: int,
    ) -> None:
        self._results.update((item.image_id, item) for item in prediction)

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        results = gather_by_image(self._results, world_size=trainer.world_size)  # every rank captioned a share
        self._results = {}
        predicted = trainer.datamodule.predict
        if not results:  # on every rank: each holds the gathered results
            raise CaptionError(f"data.predict: not one image of {predicted} could be read (each is named in a warning "
                               "above); nothing written")
        if predicted in SPLITS:  # a split's images: their files from the dataset's records, where it has files
            files = {record.image_id: record.file for record in trainer.datamodule.usable(predicted)}
            results = {key: replace(item, file_name=files.get(key)) for key, item in results.items()}
        if trainer.is_global_zero:
            json_path, csv_path = write_results([results[key] for key in sorted(results)], self.out)
            rank_zero_info(f"wrote {len(results)} images' captions to {json_path} and {csv_path.name}")
