"""Training callbacks for long and pre-emptible runs: a fresh `last.ckpt`, and tokens per second.

`PeriodicCheckpoint` keeps `last.ckpt` no older than N optimizer steps, so a run that is killed or
pre-empted continues with `--ckpt_path last` and loses at most the steps since that save:

    caption fit --config configs/shapes_soft.yaml --periodic_checkpoint.every_n_train_steps 500
    caption fit --config configs/shapes_soft.yaml --ckpt_path last        # after a crash or pre-emption

Ctrl-C (SIGINT) saves `last.ckpt` like SIGTERM before the run stops; a second Ctrl-C stops at once.
`last.ckpt` is written next to the best checkpoints (the `checkpoint:` ModelCheckpoint's folder,
`<trainer.default_root_dir>/checkpoints` in the CLI), which is where Lightning's `ckpt_path="last"`
looks. The best-on-validation-BLEU-4 checkpoints stay the ModelCheckpoint's job.
"""

import os
import signal
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from caption.errors import ConfigError
from caption.outputs import cannot_write
from caption.text import Vocabulary

LAST = "last.ckpt"


class PeriodicCheckpoint(Callback):
    """Writes `last.ckpt` every N optimizer steps, after every validation, at the end of training, and
    when the run receives SIGTERM (Lightning stops after the current batch; this saves before it exits)
    or SIGINT (Ctrl-C: saved where the run stopped; a second Ctrl-C during the save stops at once).

    Args:
        every_n_train_steps: save every this many optimizer steps (0: only at validation, end and SIGTERM).
    """

    def __init__(self, every_n_train_steps: int = 1000):
        super().__init__()
        if every_n_train_steps < 0:
            raise ConfigError(f"periodic_checkpoint.every_n_train_steps must be >= 0, got {every_n_train_steps}")
        self.every_n_train_steps = every_n_train_steps
        self._saved_step = -1

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0:
            self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if isinstance(exception, KeyboardInterrupt):
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Lightning ignores further Ctrl-C: let one stop the save
            rank_zero_info(f"SIGINT: saving {self.path(trainer)} (press Ctrl-C again to stop without saving)")
        elif not isinstance(exception, SIGTERMException):
            return
        path = self._save(trainer)
        name = "SIGINT" if isinstance(exception, KeyboardInterrupt) else "SIGTERM"
        rank_zero_info(f"{name}: saved {path} at global step {trainer.global_step}; resume with --ckpt_path last")

    @staticmethod
    def path(trainer: L.Trainer) -> str:
        """`last.ckpt` in the ModelCheckpoint's folder (or `<default_root_dir>/checkpoints` without one)."""
        checkpoint = trainer.checkpoint_callback
        folder = getattr(checkpoint, "dirpath", None) or os.path.join(trainer.default_root_dir, "checkpoints")
        return os.path.join(folder, LAST)

    def _save(self, trainer: L.Trainer) -> str:
        path = self.path(trainer)
        if trainer.fast_dev_run or trainer.global_step in (0, self._saved_step):
            return path
        # the full state (optimizer, loops, callbacks) for resuming; every rank calls it, rank 0 writes atomically
        try:
            trainer.save_checkpoint(path, weights_only=False)
        except OSError as error:
            raise cannot_write(path, error, what="checkpoint") from None
        self._saved_step = trainer.global_step
        return path


class TokensPerSecond(Callback):
    """Logs `train/tokens_per_sec`: target words (with <end>) over all ranks per second of training step
    (forward, backward and optimizer; data loading that does not overlap with it is not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self._start = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # kernels are asynchronous: wait before reading the clock
        seconds = time.perf_counter() - self._start
        tokens = (batch["caption"][:, 1:] != Vocabulary.PAD).sum().float()
        pl_module.log(
            "train/tokens_per_sec", tokens / seconds, on_step=True, on_epoch=False,
            sync_dist=True, reduce_fx="sum", batch_size=batch["caption"].shape[0],
        )
