"""Lightning's own notes left out of `caption predict`'s console: it prints what it wrote, and what went wrong.

Lightning logs info lines (devices, seed, tips, restoring states) and warns about training-only state of the
checkpoint; inside `quiet_lightning` only warnings, errors and this package's own info lines get through.
"""

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # caption/
# where Lightning logs its info lines (rank_zero_info; seed_everything)
LIGHTNING_INFO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                          "lightning.fabric.utilities.seed")


class OwnLinesOnly(logging.Filter):
    """Lets through warnings and errors, and the info lines this package logs through Lightning's loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or Path(record.pathname).is_relative_to(PACKAGE)


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's own notes left out (devices, seed, tips, restoring states, warnings about training-only state
    of the checkpoint): `caption predict` says what it wrote, and what went wrong."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_INFO_LOGGERS]
    only_ours = OwnLinesOnly()
    for logger in loggers:
        logger.addFilter(only_ours)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"lightning(_fabric|_utilities)?\.")
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(only_ours)
