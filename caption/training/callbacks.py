"""Training callbacks: a fresh `last.ckpt` for long and pre-emptible runs, tokens per second, MFU on a GPU, a stop
once attention accuracy stops rising (`AttentionPatience`), and the training figures logged in every epoch, however
short (`LoggingInterval`).

`PeriodicCheckpoint` keeps `last.ckpt` no older than N optimizer steps, so a run that is killed or
pre-empted continues with `--ckpt_path last` and loses at most the steps since that save:

    caption fit --config shapes_soft --periodic_checkpoint.every_n_train_steps 500
    caption fit --config shapes_soft --ckpt_path last        # after a crash or pre-emption

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
from lightning.pytorch.callbacks import Callback, EarlyStopping, ThroughputMonitor
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from caption.errors import ConfigError
from caption.io.outputs import cannot_write
from caption.model.flops import DecoderFlops
from caption.model.vocabulary import Vocabulary
from caption.training.preemption import SigtermAgreement

LAST = "last.ckpt"


class PeriodicCheckpoint(Callback):
    """Writes `last.ckpt` every N optimizer steps, after every validation, at the end of training, and
    when the run receives SIGTERM (Lightning stops after the current batch; this saves before it exits; on several
    processes every rank stops after the same batch, `caption.training.preemption`) or SIGINT (Ctrl-C: saved where the
    run stopped; a second Ctrl-C during the save stops at once).

    Args:
        every_n_train_steps: save every this many optimizer steps (0: only at validation, end and SIGTERM).
    """

    def __init__(self, every_n_train_steps: int = 1000):
        super().__init__()
        if every_n_train_steps < 0:
            raise ConfigError(f"periodic_checkpoint.every_n_train_steps must be >= 0, got {every_n_train_steps}")
        self.every_n_train_steps = every_n_train_steps
        self._saved_step = -1
        self._sigterm = SigtermAgreement()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sigterm.start(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0:
            self._save(trainer)
        self._sigterm.agree(trainer)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any, **__: Any) -> None:
        self._sigterm.agree(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sigterm.stop()  # before Lightning puts back the handlers it found
        self._save(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """Save on SIGTERM and Ctrl-C, and say what was saved; nothing is claimed that was not written."""
        self._sigterm.stop()
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if isinstance(exception, KeyboardInterrupt):
            name = "SIGINT"
        elif isinstance(exception, SIGTERMException):
            name = "SIGTERM"
        else:
            return
        if trainer.fast_dev_run or trainer.global_step == 0:  # e.g. stopped during the sanity check
            why = "fast_dev_run saves none" if trainer.fast_dev_run else "stopped before the first training step"
            rank_zero_info(f"{name}: nothing saved ({why}); nothing trained is lost")
            return
        if name == "SIGINT":
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Lightning ignores further Ctrl-C: let one stop the save
            rank_zero_info(f"SIGINT: saving {self.path(trainer)} (press Ctrl-C again to stop without saving)")
        path = self._save(trainer)
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


def logs_this_step(trainer: L.Trainer, *, stepped: bool) -> bool:
    """Whether Lightning writes this training batch's step metrics to the loggers, asked at the batch's end: the
    batch `stepped` the optimizer (it did not only accumulate gradients) and `trainer.log_every_n_steps` falls on
    that step (`trainer.global_step`, already counting it), or training is about to stop. The same test as
    Lightning's own (`update_train_step_metrics`) for one optimizer stepped once per batch, as `CaptionModule`'s,
    read from public attributes only; so a value logged here is written at once, never overwritten by a later batch
    before it reaches the loggers."""
    if not stepped:
        return False
    if trainer.fast_dev_run:
        return True
    if trainer.log_every_n_steps == 0:
        return False
    return trainer.global_step % trainer.log_every_n_steps == 0 or trainer.should_stop


class LoggingInterval(Callback):
    """The training figures logged at least once an epoch: `trainer.log_every_n_steps` lowered to an epoch's batches
    when an epoch is shorter than it (Lightning would log none of a short run's steps, and warn that it does not;
    the check passes here, before the batches are counted, then the interval is set once they are); and logged at
    the run's first optimizer step and at its last one (`trainer.max_steps`), so a run shorter than the interval
    still has training curves from step 0 (the interval is 1 for the batches of those steps only)."""

    def __init__(self) -> None:
        self.interval: int | None = None  # the configured one, while the batches are being counted
        self.between: int | None = None  # the interval to restore after a step logged out of turn

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.log_every_n_steps > 1:
            self.interval, trainer.log_every_n_steps = trainer.log_every_n_steps, 1  # only between the two hooks

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.interval is None:
            return
        batches = trainer.num_training_batches
        per_epoch = int(batches) if 0 < batches < float("inf") else self.interval
        trainer.log_every_n_steps, self.interval = min(self.interval, per_epoch), None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.restore(trainer)
        if trainer.log_every_n_steps > 1 and is_first_or_last_step(trainer):
            self.between, trainer.log_every_n_steps = trainer.log_every_n_steps, 1

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.restore(trainer)

    def restore(self, trainer: L.Trainer) -> None:
        if self.between is not None:
            trainer.log_every_n_steps, self.between = self.between, None


def is_first_or_last_step(trainer: L.Trainer) -> bool:
    """Whether the coming batch is part of the run's first optimizer step or of its last (`trainer.max_steps`)."""
    return trainer.global_step == 0 or trainer.global_step == trainer.max_steps - 1


class TokensPerSecond(Callback):
    """Logs `train/tokens_per_sec`: target words (with <end>) over all ranks per second of training, over the
    steps since the last log, every `trainer.log_every_n_steps` optimizer steps.

    Timing one step on a GPU needs its queue drained (`torch.cuda.synchronize`), and summing over ranks needs an
    all-reduce: both stall the pipeline, so they happen once per logged window, not per step. Tokens are added up
    on the device; the clock runs from the first batch of the window to the end of its last step, so data loading
    between steps counts (without a synchronisation per step the clock cannot tell it apart), and validation
    inside the window does not (the clock stops for it).
    """

    def __init__(self) -> None:
        super().__init__()
        self._tokens: torch.Tensor | int = 0  # this rank's target tokens in the window
        self._seconds = 0.0  # training time of the window before the running stretch
        self._since: float | None = None  # when the running stretch started (None: the clock is stopped)
        self._step_before = 0  # the optimizer steps before this batch: the batch stepped if it grew

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._step_before = trainer.global_step
        if self._since is None:
            self._since = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self._tokens = self._tokens + (batch["caption"][:, 1:] != Vocabulary.PAD).sum()
        if not logs_this_step(trainer, stepped=trainer.global_step > self._step_before):
            return
        self._stop_clock(pl_module)
        tokens = trainer.strategy.reduce(self._tokens, reduce_op="sum")  # every rank logs on the same steps
        pl_module.log(
            "train/tokens_per_sec", tokens.float() / self._seconds, on_step=True, on_epoch=False,
            batch_size=batch["caption"].shape[0],
        )
        self._tokens, self._seconds = 0, 0.0

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._since is not None:  # validation inside a window: not training time
            self._stop_clock(pl_module)

    def _stop_clock(self, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # kernels are asynchronous: wait before reading the clock
        self._seconds += time.perf_counter() - self._since
        self._since = None


class ModelFlopsUtilization(ThroughputMonitor):
    """On a CUDA device, Lightning's ThroughputMonitor with the decoder's analytic FLOPs (`caption.model.flops`), so it
    logs `train/device/mfu` (achieved FLOP/s over the GPU's peak for the run's precision, from Lightning's table)
    and `train/device/flops_per_sec` beside its batches and samples per second, every `trainer.log_every_n_steps`
    steps once `window_size` batches have been seen. Validation and test throughput are logged without FLOPs
    (decoding costs differ from training and are not counted per batch).

    The FLOPs of a batch are those the decoder needs for the captions it is trained on (real tokens, each of the
    `model.hard.samples` Monte Carlo copies), read from the decoder's input: with cached features (the COCO and Flickr
    configs) that is the whole model; training from images leaves the CNN out, so MFU is then a lower bound.

    On a CPU it does nothing, silently: ThroughputMonitor has no peak FLOP/s for a CPU (no MFU), it synchronises
    every step, and `TokensPerSecond` already measures throughput there; so a config can list it for every device.

    Args:
        window_size: batches in the rolling window the rates are computed over (ThroughputMonitor's).
    """

    def __init__(self, window_size: int = 100) -> None:
        super().__init__(batch_size_fn=rows_in, window_size=window_size)
        self.active = False
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._forwards: list[tuple[int, int, torch.Tensor]] = []  # this batch's (locations, rows, tokens) per forward

    @staticmethod
    def measures(trainer: L.Trainer) -> bool:
        """Only on a CUDA device (see the class docstring)."""
        return trainer.strategy.root_device.type == "cuda"

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.active = self.measures(trainer)
        if not self.active:
            return
        super().setup(trainer, pl_module, stage)
        pl_module.flops_per_batch = None  # ThroughputMonitor reads it after every batch; None: not counted
        if self._hook is None:
            self._hook = pl_module.model.decoder.register_forward_pre_hook(self._record_forward)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _record_forward(self, decoder: torch.nn.Module, inputs: tuple[torch.Tensor, torch.Tensor]) -> None:
        """The decoder's teacher-forced forward is the training step's: (B, L, D) annotations, (B, T+1) captions
        (with hard attention's Monte Carlo copies). Tokens stay on the device: read after the step, not during it."""
        annotations, captions = inputs[:2]  # (images, when given, are the third)
        tokens = (captions[:, 1:] != Vocabulary.PAD).sum()
        self._forwards.append((annotations.shape[1], captions.shape[0], tokens))

    def batch_flops(self, pl_module: L.LightningModule) -> int:
        """Forward + backward FLOPs of the decoder's training forwards in the batch that just ended."""
        return sum(
            DecoderFlops.of(pl_module.model.decoder, locations).training(captions=rows, tokens=int(tokens))
            for locations, rows, tokens in self._forwards
        )

    def on_train_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.active:
            super().on_train_start(trainer, *args)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._forwards = []

    @rank_zero_only  # as ThroughputMonitor's: the other ranks neither read the token counts nor log
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if not self.active:
            return
        pl_module.flops_per_batch = self.batch_flops(pl_module)
        super().on_train_batch_end(trainer, pl_module, *args)
        pl_module.flops_per_batch = None

    def on_validation_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.active:
            super().on_validation_start(trainer, *args)

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.active:
            super().on_validation_batch_end(trainer, *args, **kwargs)

    def on_validation_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.active:
            super().on_validation_end(trainer, *args)

    def on_test_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.active:
            super().on_test_start(trainer, *args)

    def on_test_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.active:
            super().on_test_batch_end(trainer, *args, **kwargs)

    def on_predict_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.active:
            super().on_predict_start(trainer, *args)

    def on_predict_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.active:
            super().on_predict_batch_end(trainer, *args, **kwargs)


def rows_in(batch: dict[str, Any]) -> int:
    """Samples in a batch: its rows (a training batch's captions, an evaluation batch's images)."""
    return len(batch["image_id"])


class AttentionPatience(EarlyStopping):
    """Training that ends when where the model looks stops improving: Lightning's EarlyStopping on validation
    attention accuracy, off unless `patience` is set (`early_stopping:` in a config; trainer.max_epochs stays the cap).
    Counted in validations, not seconds, so the epoch it stops at does not depend on the machine's speed.

        caption fit --config shapes_soft_scratch --early_stopping.patience 2 --trainer.max_epochs 30

    Args:
        patience: validations without a rise of more than `min_delta` before training stops (None: never stops early).
        monitor: the logged figure (val/attention_accuracy needs data with boxes; val/bleu4 works on any).
        min_delta: the smallest change that counts as a rise.
    """

    def __init__(self, patience: int | None = None, monitor: str = "val/attention_accuracy", min_delta: float = 0.0):
        if patience is not None and patience < 1:
            raise ConfigError(f"early_stopping.patience must be >= 1 (or null: off), got {patience}")
        super().__init__(monitor=monitor, min_delta=min_delta, patience=patience or 1, mode="max", strict=False,
                         check_finite=False)
        self.enabled = patience is not None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.enabled:
            return
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        value = trainer.callback_metrics.get(self.monitor)
        if fitting and (value is None or not torch.isfinite(value)):
            raise ConfigError(f"early_stopping.monitor {self.monitor} was not measured at this validation (attention "
                              "accuracy needs data with object boxes): monitor val/bleu4, or set "
                              "early_stopping.patience: null")
        super().on_validation_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.enabled:
            super().on_train_epoch_end(trainer, pl_module)
