"""The files a Lightning run writes besides its checkpoints, with the same one-line errors as the checkpoints.

A run also writes its config (`config.yaml`, LightningCLI's SaveConfigCallback) and its logs (the loggers'
`hparams.yaml` and `metrics.csv`, TensorBoard's event files). On a full disk those writes raise a bare
`OSError` ("No space left on device", no file named) from deep inside Lightning, and after the run has already
failed, the loggers' final save fails again and adds tracebacks. Here each such write error becomes the
`OutputError` line of `caption.io.outputs.cannot_write`, naming the folder; a logger's final save after a failed
run is skipped quietly when it cannot be written (the run's own error already says what went wrong).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import Logger

from caption.io.outputs import OutputError, cannot_write

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
        except (OSError, OutputError) as error:  # OutputError: from another guarded method (finalize calls save)
            status = args[0] if args else kwargs.get("status")
            if finalizing and status != "success":
                return None  # the run already failed with its own error; its logs cannot be saved as well
            if isinstance(error, OutputError):
                raise
            raise cannot_write(logger_folder(logger), error, what=f"the logs of {type(logger).__name__} in") from None

    return write
