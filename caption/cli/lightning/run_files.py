"""The files a Lightning run writes besides its checkpoints, written as the checkpoints are, with their one-line errors.

A run also writes its config (`config.yaml`, LightningCLI's SaveConfigCallback) and its logs (the loggers'
`hparams.yaml` and `metrics.csv`, TensorBoard's event files). Lightning writes them in place, through whatever link
is planted at their names, and a full disk leaves them empty or cut short. Inside `atomic_logger_files` (the whole
command) `hparams.yaml` and `metrics.csv` are written whole with `caption.io.outputs.write_atomically` (a new file
beside the target, renamed over it: a link there is replaced, not written through; a full disk leaves the previous
file or none); `config.yaml` is written so by the parser (`caption.cli.lightning.parser`). TensorBoard's event files
are streams its writer appends to under a name of the time, host and process: left to it.

On a full disk those writes fail from deep inside Lightning, and after the run has already failed, the loggers'
final save fails again and adds tracebacks. Here each such write error becomes the `OutputError` line of
`caption.io.outputs.cannot_write`, naming the folder; a logger's final save after a failed run is skipped quietly
when it cannot be written (the run's own error already says what went wrong).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import os
import threading
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_warn

from caption.io.outputs import OutputError, cannot_write, write_atomically

WRITING_METHODS = ("log_hyperparams", "log_metrics", "save", "finalize")  # every Logger method that may write


class SaveConfig(SaveConfigCallback):
    """LightningCLI's config saver (`<log_dir>/config.yaml`); a failed write is one line naming the file."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        try:
            super().setup(trainer, pl_module, stage)
        except OSError as error:
            path = os.path.join(trainer.log_dir or trainer.default_root_dir, self.config_filename)
            raise cannot_write(path, error, what="the run's config") from None


def logger_folder(logger: Logger) -> str:
    """Where `logger` writes: its version folder if it has one, else its save_dir."""
    try:
        return str(logger.log_dir or logger.save_dir)
    except (AttributeError, OSError):  # a logger without folders, or one whose folder cannot even be listed
        return str(logger.save_dir)


def guard_logger_writes(logger: Logger) -> None:
    """Make every write of `logger` raise the one-line `OutputError` naming its folder instead of a bare OSError;
    its `finalize` after a failed or interrupted run gives up quietly if it cannot write."""
    for name in WRITING_METHODS:
        setattr(logger, name, guarded(getattr(logger, name), logger=logger, finalizing=name == "finalize"))


def guarded(method: Callable[..., Any], *, logger: Logger, finalizing: bool) -> Callable[..., Any]:
    @functools.wraps(method)
    def write(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (OSError, OutputError, ValueError) as raised:  # OutputError: from another guarded method (finalize
            # calls save); ValueError: Lightning's TensorBoard logger raises any failure of its writer as one
            error = raised.__cause__ if isinstance(raised, ValueError) else raised
            if not isinstance(error, (OSError, OutputError)):
                raise
            status = args[0] if args else kwargs.get("status")
            if finalizing and status != "success":
                return None  # the run already failed with its own error; its logs cannot be saved as well
            if isinstance(error, OutputError):
                raise error from None
            raise cannot_write_logs(logger, error) from None

    return write


def save_hparams_atomically(config_yaml: Any, hparams: Any, use_omegaconf: bool = True, *,
                            original: Callable[..., None]) -> None:
    """Lightning's `save_hparams_to_yaml` for a local file, written whole with `write_atomically`; the values that
    YAML cannot hold are written as their type's name, with Lightning's warning."""
    if "://" in str(config_yaml):  # remote storage: Lightning's own
        return original(config_yaml, hparams, use_omegaconf)
    settings = dict(vars(hparams) if not isinstance(hparams, dict) else hparams)
    for key, value in settings.items():
        value = value.name if isinstance(value, Enum) else value
        try:
            yaml.dump(value)
        except (TypeError, ValueError):
            rank_zero_warn(f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.")
            value = type(value).__name__
        settings[key] = value
    write_atomically(config_yaml, yaml.dump(settings).encode("utf-8"), what="the logger's hyperparameters")
    return None


def save_metrics_atomically(writer: Any, *, original: Callable[[Any], None]) -> None:
    """Lightning's CSV experiment writer's `save` for a local file: every row logged so far rewritten as one new
    metrics.csv (`write_atomically`) instead of appended in place."""
    if not writer.metrics:
        return
    if "://" in str(writer.metrics_file_path):
        return original(writer)
    written = writer.__dict__.setdefault("rows_written", [])  # this writer's rows, in the order logged
    writer._record_new_keys()  # the header: every key logged so far, sorted
    table = io.StringIO()
    rows = csv.DictWriter(table, fieldnames=writer.metrics_keys)
    rows.writeheader()
    rows.writerows([*written, *writer.metrics])
    write_atomically(writer.metrics_file_path, table.getvalue().encode("utf-8"), what="the logged metrics")
    written.extend(writer.metrics)
    writer.metrics = []
    return None


def cannot_write_logs(logger: Logger, error: OSError) -> OutputError:
    """The one-line error of a failed write of `logger`, naming its folder, once the empty event files a failed
    TensorBoard writer leaves there are removed (a partial one is kept: TensorBoard reads it up to its last whole
    record)."""
    folder = logger_folder(logger)
    for events in Path(folder).glob("events.out.tfevents.*"):
        with contextlib.suppress(OSError):
            if events.is_file() and not events.is_symlink() and not events.stat().st_size:
                events.unlink()
    return cannot_write(folder, error, what=f"the logs of {type(logger).__name__} in")


def guarded_experiment(experiment: property) -> property:
    """A logger's `experiment` property (which creates its writer, and TensorBoard's first event file) raising the
    one-line `OutputError` naming its folder instead of a bare OSError, and leaving no empty event file behind."""
    def created(logger: Logger) -> Any:
        try:
            return experiment.fget(logger)
        except OSError as error:
            raise cannot_write_logs(logger, error) from None

    return property(created, doc=experiment.__doc__)


def quiet_event_writer(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """`threading.excepthook` without the traceback of TensorBoard's writer thread failing to write: its logger's
    next call raises the same error, then said in one line (`guarded`)."""
    def excepthook(args: Any) -> None:
        if not (isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
            hook(args)

    return excepthook


@contextlib.contextmanager
def atomic_logger_files() -> Iterator[None]:
    """While inside, Lightning's CSV and TensorBoard loggers write hparams.yaml and metrics.csv through
    `write_atomically`, and say a failed write of their folders or event files in one line; as they were afterwards."""
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, csv_logs, tensorboard

    patches = [(module, "save_hparams_to_yaml", functools.partial(save_hparams_atomically,
                                                                   original=module.save_hparams_to_yaml))
               for module in (csv_logs, tensorboard)]
    patches.append((_ExperimentWriter, "save", functools.partialmethod(save_metrics_atomically,
                                                                        original=_ExperimentWriter.save)))
    for logger in (CSVLogger, TensorBoardLogger):
        owner = next(kind for kind in logger.__mro__ if "experiment" in vars(kind))
        patches.append((owner, "experiment", guarded_experiment(vars(owner)["experiment"])))
    patches.append((threading, "excepthook", quiet_event_writer(threading.excepthook)))
    before = [(owner, name, vars(owner)[name]) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, value in reversed(before):
            setattr(owner, name, value)
