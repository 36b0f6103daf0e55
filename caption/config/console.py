"""What the `caption` command prints besides its own lines: third-party chatter is left out unless `-v` asks for it.

    caption fit --config shapes_soft        # the project's lines, Lightning's progress and summary, warnings
    caption -v fit --config shapes_soft     # and the dependencies' deprecations, Lightning's tips, tokenizer notes

Left out by default: deprecation warnings that the dependencies raise about each other (e.g. Lightning's use of a
torch name torch deprecates), Lightning's advertising tips, and the notes the project's own libraries log at
debug level (coco-caption's Java tokenizer saying how many tokens it read: `caption.evaluation.ptb_tokenizer`). Warnings raised
about this project's own code and every other warning still show. All of it holds for the duration of one
command only (`console`, around `caption.cli.main`): importing or calling the library changes no warning filter
and no logger.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator

DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
# where Lightning logs its notes (rank_zero_info), its tips among them
LIGHTNING_NOTE_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
TIP = "💡 Tip:"  # how Lightning starts a tip (advertising another package)
PROJECT_LOGGER = "caption"  # the project's libraries log under caption.<module>


class NoTips(logging.Filter):
    """Leaves out Lightning's tips; its other notes pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP)


@contextlib.contextmanager
def console(*, verbose: bool = False) -> Iterator[None]:
    """The console of one `caption` command: quiet (the default) or, with `verbose`, everything the dependencies
    and the project's debug notes say. Restores every filter and handler it changed on the way out."""
    project = logging.getLogger(PROJECT_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    no_tips = NoTips()
    note_loggers = [logging.getLogger(name) for name in LIGHTNING_NOTE_LOGGERS]
    old_level = project.level
    with warnings.catch_warnings():
        if verbose:
            project.addHandler(handler)
            project.setLevel(logging.DEBUG)
        else:
            for category in DEPRECATIONS:
                warnings.filterwarnings("ignore", category=category)
                warnings.filterwarnings("default", category=category, module=r"caption(\.|$)")  # ours still show
            for logger in note_loggers:
                logger.addFilter(no_tips)
        try:
            yield
        finally:
            project.removeHandler(handler)
            project.setLevel(old_level)
            for logger in note_loggers:
                logger.removeFilter(no_tips)
