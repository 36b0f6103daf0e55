"""The project's loggers: Lightning's CSV and TensorBoard loggers, with their files written whole and their failures
in one line.

    trainer:
      logger:
        class_path: caption.training.loggers.CSVLogger     # or caption.training.loggers.TensorBoardLogger
        init_args: {save_dir: runs/shapes, name: logs}

Lightning's own loggers write `hparams.yaml` and `metrics.csv` in place: through whatever link is planted at their
names, and cut short by a full disk. These subclasses write both with `caption.io.outputs.write_atomically` (a new
file beside the target, renamed over it: a link there is replaced, not written through; a failed write leaves the
previous file or none), and say a failed write as the one `OutputError` line naming the folder. A logger's final save
after a failed run gives up quietly when it cannot write: the run's own error already says what went wrong.
TensorBoard's event files are streams its writer thread appends to: left to it (a failure there is said when the
logger next writes). Lightning's own classes still work in a config; they just keep Lightning's behaviour.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import os
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import loggers
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from caption.io.outputs import OutputError, cannot_write, write_atomically

HPARAMS = "hparams.yaml"  # Lightning's name for the logged hyperparameters, in the logger's version folder


def hparams_yaml(hparams: Any) -> bytes:
    """The hyperparameters as Lightning's `save_hparams_to_yaml` writes them; a value YAML cannot hold is written as
    its type's name, with Lightning's warning."""
    settings = dict(vars(hparams) if not isinstance(hparams, dict) else hparams)
    for key, value in settings.items():
        value = value.name if isinstance(value, Enum) else value
        try:
            yaml.dump(value)
        except (TypeError, ValueError):
            rank_zero_warn(f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.")
            value = type(value).__name__
        settings[key] = value
    return yaml.dump(settings).encode("utf-8")


class AtomicExperimentWriter(ExperimentWriter):
    """The CSV logger's writer: `hparams.yaml` and `metrics.csv` rewritten whole at each save, every row logged so
    far under a header of every key logged so far, sorted."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir=log_dir)
        self.rows: list[dict[str, Any]] = []  # the rows written so far, in the order logged

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)
        write_atomically(os.path.join(self.log_dir, HPARAMS), hparams_yaml(self.hparams),
                         what="the logger's hyperparameters")

    def save(self) -> None:
        if not self.metrics:
            return
        rows = [*self.rows, *self.metrics]
        self.metrics_keys = sorted(set(self.metrics_keys).union(*self.metrics))  # every key logged so far
        table = io.StringIO()
        writer = csv.DictWriter(table, fieldnames=self.metrics_keys)
        writer.writeheader()
        writer.writerows(rows)
        write_atomically(self.metrics_file_path, table.getvalue().encode("utf-8"), what="the logged metrics")
        self.rows, self.metrics = rows, []


class OneLineErrors:
    """A logger whose failed writes are one `OutputError` line naming its folder (after removing the empty event files
    a failed TensorBoard writer leaves), and whose final save after a failed run gives up quietly."""

    log_dir: str

    @contextlib.contextmanager
    def writing(self, *, finalizing: str | None = None) -> Iterator[None]:
        try:
            yield
        except (OSError, OutputError, ValueError) as raised:  # Lightning's TensorBoard logger: a writer's as ValueError
            error = raised.__cause__ if isinstance(raised, ValueError) else raised
            if not isinstance(error, (OSError, OutputError)):
                raise
            if finalizing not in (None, "success"):
                return  # the run already failed with its own error; its logs cannot be saved as well
            if isinstance(error, OutputError):  # a file's own write (`write_atomically`) said it already
                raise error from None
            for events in Path(self.log_dir).glob("events.out.tfevents.*"):  # a partial one stays: it can be read
                with contextlib.suppress(OSError):
                    if events.is_file() and not events.is_symlink() and not events.stat().st_size:
                        events.unlink()
            raise cannot_write(self.log_dir, error, what=f"the logs of {type(self).__name__} in") from None


def guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` of a `OneLineErrors` logger, run inside its `writing`."""
    @functools.wraps(method)
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.writing():
            return method(self, *args, **kwargs)

    return write


class CSVLogger(OneLineErrors, loggers.CSVLogger):
    """Lightning's CSVLogger (`save_dir/name/version_N/`), writing through `AtomicExperimentWriter`."""

    writer: AtomicExperimentWriter | None = None

    @property
    @rank_zero_experiment
    def experiment(self) -> AtomicExperimentWriter:
        if self.writer is None:
            with self.writing():
                os.makedirs(self.root_dir, exist_ok=True)
                self.writer = AtomicExperimentWriter(log_dir=self.log_dir)
        return self.writer

    log_hyperparams = guarded(loggers.CSVLogger.log_hyperparams)
    log_metrics = guarded(loggers.CSVLogger.log_metrics)
    save = guarded(loggers.CSVLogger.save)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self.writer is not None:  # not on the processes that never logged
            with self.writing(finalizing=status):
                self.writer.save()


class TensorBoardLogger(OneLineErrors, loggers.TensorBoardLogger):
    """Lightning's TensorBoardLogger, its `hparams.yaml` written atomically (needs `tensorboard`)."""

    @property
    def experiment(self) -> Any:
        with self.writing():
            return super().experiment

    log_hyperparams = guarded(loggers.TensorBoardLogger.log_hyperparams)
    log_metrics = guarded(loggers.TensorBoardLogger.log_metrics)
    log_graph = guarded(loggers.TensorBoardLogger.log_graph)

    @rank_zero_only
    def save(self) -> None:
        with self.writing():
            self.experiment.flush()
            hparams = Path(self.log_dir) / HPARAMS
            if Path(self.log_dir).is_dir() and not hparams.is_file():
                write_atomically(hparams, hparams_yaml(self.hparams), what="the logger's hyperparameters")

    @rank_zero_only
    def finalize(self, status: str) -> None:
        with self.writing(finalizing=status):
            super().finalize(status)
