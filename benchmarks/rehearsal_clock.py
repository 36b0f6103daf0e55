"""A callback for `benchmarks/coco_rehearsal.py`: when each stage of a `caption fit` happened, in the run itself.

Added to a run with `--trainer.callbacks+=rehearsal_clock.StageClock` (benchmarks/ on PYTHONPATH); rank 0 appends a
JSON line per event to $REHEARSAL_CLOCK: the process start, the sanity check, every training step's end, every
validation's start and end, and at the end of training the time and size of one full checkpoint saved the way
`last.ckpt` is (`trainer.save_checkpoint`, optimizer and loops included), written beside it and then removed.
"""

import json
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import psutil
from lightning.pytorch.callbacks import Callback


class StageClock(Callback):
    def _write(self, trainer: L.Trainer, event: str, **extra: Any) -> None:
        if trainer.global_rank == 0:
            with open(os.environ["REHEARSAL_CLOCK"], "a") as file:
                file.write(json.dumps({"event": event, "time": time.time(), "step": trainer.global_step,
                                       **extra}) + "\n")

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._write(trainer, "process_start", at=psutil.Process().create_time())

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, "sanity_start")

    def on_sanity_check_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, "sanity_end")

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._write(trainer, "step_end")

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._write(trainer, "validation_start")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._write(trainer, "validation_end", images=len(trainer.datamodule.usable("val")))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        path = Path(trainer.default_root_dir) / "checkpoints" / "timed.ckpt"
        started = time.perf_counter()
        trainer.save_checkpoint(path, weights_only=False)
        seconds = time.perf_counter() - started
        if trainer.global_rank == 0:
            self._write(trainer, "checkpoint_saved", seconds=seconds, bytes=path.stat().st_size)
            path.unlink()
