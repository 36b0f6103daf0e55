"""What a run shows while it trains and when it ends: a progress bar of the few figures that move, then a summary.

`ProgressBar` is Lightning's TQDMProgressBar with the `shown` figures only, each epoch's finished bar kept; written to a
file or a pipe (a cluster's log) instead of a terminal, a bar is a line per write, written at most every
`file_refresh_s` seconds and `file_refreshes` times, and once finished. `ParameterCount` is Lightning's model summary in
one line, with the precision (and in `caption validate` and `test`, a line of the precision alone). `FitSummary` records
every validation's figures; `summary` names the kept epoch (the model-selection checkpoint's), its figures and the test
figures, and the folders the run wrote to. What they look like: docs/console.md#progress-bar-and-summary.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelSummary, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from caption.io.device import bf16_support

SHOWN = ("loss", "val/bleu4", "val/attention_accuracy")  # the figures of the bar, when logged
# the figures of the summary, where logged: the paper's metrics, where the model looked, how sharp its attention is
SUMMARY = ("bleu1", "bleu4", "meteor", "rouge_l", "cider", "attention_accuracy", "alpha_entropy")
TEST_GREEDY = "test/greedy/"  # the test figures of greedy decoding beside a beam's (`CaptionModule.on_test_epoch_end`)


class FileTqdm(Tqdm):
    """A bar written to a file or a pipe, where nothing is redrawn: each write a line of its own (never a line left
    open for the next message to join), refreshed only once `every_s` seconds have passed and 1/`refreshes` of the
    bar has been done since it was last written (none at the start), and written once finished, by `close`, if it is
    kept (`leave`): a kept bar takes at most `refreshes` + 1 lines, however slow the machine; a passing one, none."""

    def __init__(self, *args: Any, every_s: float, refreshes: int, **kwargs: Any) -> None:
        self.every_s, self.refreshes = every_s, refreshes
        self.shown_at, self.shown_n = time.monotonic(), 0
        super().__init__(*args, **kwargs)

    def refresh(self, nolock: bool = False, lock_args: Any = None) -> None:
        finished = self.total is not None and self.n >= self.total
        step = self.total / self.refreshes if self.total else 0
        if finished or time.monotonic() - self.shown_at < self.every_s or self.n - self.shown_n < step:
            return
        self.shown_at, self.shown_n = time.monotonic(), self.n
        super().refresh(nolock=nolock, lock_args=lock_args)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        """The bar as a line of its own, if it is kept; `msg` (tqdm's way to clear it) writes nothing."""
        if msg is not None or not self.leave:
            return False
        self.fp.write(f"{self}\n")
        self.fp.flush()
        return True

    def clear(self, nolock: bool = False) -> None:
        """A file keeps what was written: nothing to clear before another line (`tqdm.write`)."""

    def close(self) -> None:
        """The finished bar, once, if it is kept; then tqdm's own close, which has nothing left to write."""
        if not self.disable and self.leave:
            self.display()
            self.leave = False
        super().close()


class ParameterCount(ModelSummary):
    """Lightning's model summary in one line: the parameters that train and those frozen (Lightning's table of
    modules, with its columns of FLOPs that a CPU run leaves at 0: `caption -v`); a run that only scores (`validate`,
    `test`) gets a line of the precision alone, in place of Lightning's own line for it."""

    precision_named = False  # whether this run's precision has been named (fit's test after training: not again)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The line names the precision the run trains in, and what the device has for bf16 (`precision_note`)."""
        self._summarize_kwargs = {**self._summarize_kwargs,
                                  "precision": precision_note(str(trainer.precision), pl_module.device)}
        self.precision_named = True
        super().on_fit_start(trainer, pl_module)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "validate":  # not a fit's validation
            self.name_precision(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.name_precision(trainer, pl_module)

    def name_precision(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A line of the precision the run scores in, once per run (`precision_note`)."""
        if not self.precision_named:
            self.precision_named = True
            rank_zero_info(f"scoring in {precision_note(str(trainer.precision), pl_module.device)}")

    @staticmethod
    def summarize(summary_data: Any, total_parameters: int, trainable_parameters: int, *args: Any,
                  precision: str = "", **kwargs: Any) -> None:
        frozen = total_parameters - trainable_parameters
        rank_zero_info(f"model: {get_human_readable_count(trainable_parameters).strip()} parameters trained, "
                       f"{get_human_readable_count(frozen).strip()} frozen" + (f"; {precision}" if precision else ""))


def precision_note(precision: str, device: torch.device) -> str:
    """"precision bf16-mixed (AVX-512 BF16)", or "precision 32-true" and, where the device has bf16 matrix units,
    the option that uses them."""
    support = bf16_support(device)
    if "bf16" in precision:
        return f"precision {precision} ({support if support != 'none' else 'no bf16 matrix units: emulated'})"
    if support == "none":
        return f"precision {precision}"
    return f"precision {precision} (this device has {support}: --trainer.precision bf16-mixed uses it)"


class ProgressBar(TQDMProgressBar):
    """Lightning's progress bar with the `shown` figures only, and each epoch's finished bar kept.

    Args:
        refresh_rate: redraw every this many batches (on a terminal), as Lightning's.
        shown: the logged figures the bar shows, in this order, when they are logged.
        file_refresh_s: written to a file or a pipe, a bar is written at most every this many seconds,
        file_refreshes: and at most this many times before it is finished (then once more).
        keep_test_bar: the test's finished bar stays (`caption test`); `fit`'s test after training sets it False,
            its figures being in the end summary.
    """

    def __init__(self, refresh_rate: int = 1, shown: tuple[str, ...] = SHOWN, file_refresh_s: float = 30.0,
                 file_refreshes: int = 10, keep_test_bar: bool = True):
        super().__init__(refresh_rate=refresh_rate, leave=True)
        self.shown = tuple(shown)
        self.file_refresh_s, self.file_refreshes = file_refresh_s, file_refreshes
        self.keep_test_bar = keep_test_bar

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        logged = super().get_metrics(trainer, pl_module)
        return {name: logged[name] for name in self.shown if name in logged and not is_nan(logged[name])}

    def file_bar(self, description: str, *, leave: bool) -> Tqdm:
        # at position 0: a file cannot move the cursor to a second line
        return FileTqdm(desc=description, position=0, disable=self.is_disabled, leave=leave, file=sys.stdout,
                        bar_format=self.BAR_FORMAT, every_s=self.file_refresh_s, refreshes=self.file_refreshes)

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        """Each epoch gets a new bar (leave=True); the one Lightning made before the first epoch goes unshown."""
        bar = self._train_progress_bar
        if bar is not None and bar.n == 0:
            bar.leave = False
            bar.close()
        super().on_train_epoch_start(trainer, *args)

    def init_sanity_tqdm(self) -> Tqdm:
        on_terminal = sys.stdout.isatty()
        return super().init_sanity_tqdm() if on_terminal else self.file_bar(self.sanity_check_description, leave=False)

    def init_train_tqdm(self) -> Tqdm:
        return super().init_train_tqdm() if sys.stdout.isatty() else self.file_bar(self.train_description, leave=True)

    def init_validation_tqdm(self) -> Tqdm:
        if sys.stdout.isatty():
            return super().init_validation_tqdm()
        # inside `fit` the validation bar goes when done, beside the epoch's; `caption validate` keeps it
        return self.file_bar(self.validation_description, leave=self.trainer.state.fn == "validate")

    def init_test_tqdm(self) -> Tqdm:
        if not sys.stdout.isatty():
            return self.file_bar("Testing", leave=self.keep_test_bar)
        bar = super().init_test_tqdm()
        bar.leave = self.keep_test_bar
        return bar

    def init_predict_tqdm(self) -> Tqdm:
        on_terminal = sys.stdout.isatty()
        return super().init_predict_tqdm() if on_terminal else self.file_bar(self.predict_description, leave=True)


class FitSummary(Callback):
    """Records the figures of every validation of a `fit` (not the sanity check), for `summary`."""

    def __init__(self) -> None:
        self.validations: list[tuple[int, dict[str, float]]] = []  # (epoch, {val/name: value})

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        figures = {name: float(value) for name, value in trainer.callback_metrics.items() if name.startswith("val/")}
        self.validations.append((trainer.current_epoch, figures))

    def kept(self, trainer: L.Trainer) -> tuple[int, dict[str, float], str] | None:
        """The validation of the epoch whose checkpoint model selection kept (the first to reach the monitored figure;
        without a monitor, the last epoch), and why it was kept."""
        checkpoint = trainer.checkpoint_callback
        if checkpoint is None or not self.validations:
            return None
        if not checkpoint.monitor:
            return *self.validations[-1], "the last"
        score = checkpoint.best_model_score
        if score is None:
            return None
        return next(((epoch, figures, f"best by {checkpoint.monitor}") for epoch, figures in self.validations
                     if figures.get(checkpoint.monitor) == float(score)), None)


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def figure(value: float) -> str:
    """A figure at 4 significant digits, or "missing" (NaN: METEOR without Java, no object word to localise)."""
    return "missing" if math.isnan(value) else f"{value:.4g}"


def figures_line(figures: dict[str, float], *, prefix: str) -> str:
    """The `figures` named in SUMMARY under `prefix` ("val/"), in SUMMARY's order, without the prefix."""
    return ", ".join(f"{name} {figure(figures[prefix + name])}" for name in SUMMARY if prefix + name in figures)


def logged_folders(trainer: L.Trainer) -> list[str]:
    """Where each logger of `trainer` wrote (its version folder if it has one)."""
    folders = [getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None) for logger in trainer.loggers]
    return [str(folder) for folder in folders if folder]


def summary(trainer: L.Trainer, history: FitSummary | None, test: dict[str, float] | None) -> str:
    """The end of `fit`: the best epoch and its validation figures, the test figures of its checkpoint, and the
    folders of the checkpoints and logs."""
    lines = []
    checkpoint = trainer.checkpoint_callback
    kept = history.kept(trainer) if history is not None else None
    if kept is not None:
        epoch, figures, why = kept
        lines.append(f"kept epoch {epoch} ({why}), validation: {figures_line(figures, prefix='val/')}")
    if test:
        source = "best checkpoint" if checkpoint is not None and checkpoint.best_model_path else "final weights"
        lines.append(f"test ({source}): {figures_line(test, prefix='test/')}")
        if any(name.startswith(TEST_GREEDY) for name in test):  # a beam's test beside greedy, as validation decodes
            lines.append(f"test, greedy as validation decodes: {figures_line(test, prefix=TEST_GREEDY)}")
    if checkpoint is not None and checkpoint.dirpath:
        folder = Path(checkpoint.dirpath)
        saved = sorted(path.name for path in folder.glob("*.ckpt")) if folder.is_dir() else []
        best_name = Path(checkpoint.best_model_path).name if checkpoint.best_model_path else None
        files = [f"best: {best_name}"] if best_name else []
        files += [name for name in saved if name != best_name]
        lines.append(f"checkpoints: {folder}" + (f" ({'; '.join(files)})" if files else ""))
    for folder in logged_folders(trainer):
        folder_path = Path(folder)
        written = sorted(path.name for path in folder_path.iterdir() if path.is_file()) if folder_path.is_dir() else []
        lines.append(f"logs: {folder}" + (f" ({', '.join(written)})" if written else ""))
    return "\n".join(lines)
