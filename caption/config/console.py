"""What the `caption` command prints besides its own lines: third-party chatter is left out unless `-v` asks for it.

    caption fit --config shapes_soft        # the project's lines, the progress bar, warnings in a line, the summary
    caption -v fit --config shapes_soft     # and the dependencies' deprecations, notes and tips, warnings in full

Left out by default: deprecation warnings that the dependencies raise about each other (e.g. Lightning's use of a
torch name torch deprecates), Lightning's advertising tips, its lines about accelerators the machine does not have
(`GPU available: False, used: False`, `TPU available: False, ...`) and about the seed, and the notes the project's
own libraries log at debug level (coco-caption's Java tokenizer saying how many tokens it read:
`caption.evaluation.ptb_tokenizer`). Every warning prints as one line of its own without a file path: the project's
as `caption: warning: ...`, a dependency's as `<package>: warning: ...` (with `-v`, Python's own format); a progress
bar being drawn is cleared first and drawn again below it (`write_line`), through Python's documented hook for how a
warning reads, `warnings.formatwarning` (`warnings.showwarning` is left as it is). All of it holds for the duration
of one command only (`console`, around `caption.cli.main`): importing or calling the library changes no warning
filter, no logger and no stream. What it looks like: docs/console.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from caption.errors import CaptionWarning

DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
# where Lightning logs its notes (rank_zero_info), its tips among them, and the seed it sets
LIGHTNING_NOTE_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                          "lightning.fabric.utilities.seed")
TIP = "💡 Tip:"  # how Lightning starts a tip (advertising another package)
# Lightning's notes left out unless -v: a tip, an accelerator that is not there, the seed (the run's config.yaml has it)
LEFT_OUT_NOTES = re.compile(rf"^({re.escape(TIP)}|[A-Z]PU available: False\b|(\[rank: \d+\] )?Seed set to )")
PROJECT_LOGGER = "caption"  # the project's libraries log under caption.<module>
PACKAGE = Path(__file__).resolve().parents[1]  # caption/
SITE_FOLDERS = ("site-packages", "dist-packages")  # where an installed dependency's files are

_verbose = contextvars.ContextVar("caption_console_verbose", default=False)


def verbose() -> bool:
    """Whether the command running now was asked to show everything (`caption -v <command>`)."""
    return _verbose.get()


class LeftOutNotes(logging.Filter):
    """Leaves out Lightning's tips, its lines about accelerators the machine does not have, and the seed it set."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not LEFT_OUT_NOTES.match(str(record.msg))


def write_line(text: str, stream: TextIO) -> None:
    """`text` on lines of its own on `stream`: a progress bar being drawn (tqdm's, on stdout or stderr) is cleared
    first and drawn again below it, so no line holds both a bar and a message."""
    tqdm = sys.modules.get("tqdm")  # a bar can only be drawn once tqdm is imported
    if tqdm is None:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
    else:
        tqdm.tqdm.write(text.removesuffix("\n"), file=stream)


class ConsoleHandler(logging.Handler):
    """A logging handler that writes each record with `write_line` to the stream `sys.<stream>` is when it writes."""

    def __init__(self, stream: str = "stderr", level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write_line(self.format(record), getattr(sys, self.stream))
        except (OSError, ValueError):  # a closed or broken stream, as logging.StreamHandler: the run goes on
            self.handleError(record)


def source(filename: str) -> str:
    """Who raised a warning, by the file it names: `caption` for this project's files, the top folder under
    site-packages for a dependency's (`lightning`, `torch`), `python` for the interpreter's own, else the file's
    name."""
    if filename.startswith("<"):  # <frozen ...>, <string>
        return "python"
    path = Path(filename)
    with contextlib.suppress(OSError):
        if path.resolve().is_relative_to(PACKAGE):
            return "caption"
    parts = path.parts
    sites = [index for index, part in enumerate(parts) if part in SITE_FOLDERS and index + 1 < len(parts)]
    return Path(parts[sites[-1] + 1]).stem if sites else path.stem


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     line: str | None = None) -> str:
    """A warning as one line without its file path or source line: `caption: warning: ...` for the project's own (a
    `CaptionWarning`, or raised in its files), `<package>: warning: ...` for another's."""
    who = "caption" if issubclass(category, CaptionWarning) else source(filename)
    return f"{who}: warning: {' '.join(str(message).split())}\n"


def is_own(category: type[Warning], filename: str) -> bool:
    return issubclass(category, CaptionWarning) or source(filename) == "caption"


@contextlib.contextmanager
def console(*, verbose: bool = False) -> Iterator[None]:
    """The console of one `caption` command: quiet (the default) or, with `verbose`, everything the dependencies
    and the project's debug notes say. Restores every filter, handler and hook it changed on the way out."""
    project = logging.getLogger(PROJECT_LOGGER)
    handler = ConsoleHandler("stderr")
    left_out = LeftOutNotes()
    note_loggers = [logging.getLogger(name) for name in LIGHTNING_NOTE_LOGGERS]
    old_level = project.level
    full_format = warnings.formatwarning  # Python's own, for -v

    def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                       line: str | None = None) -> str:
        """Python's documented hook for how a warning reads: one line, written here with `write_line` (so no bar
        shares its line; Python's printer then writes the empty text returned)."""
        one_line = not verbose or is_own(category, filename)
        text = (one_line_warning if one_line else full_format)(message, category, filename, lineno, line)
        with contextlib.suppress(OSError, ValueError):  # as Python's: a closed stream loses the warning, not the run
            write_line(text, sys.stderr)
        return ""

    token = _verbose.set(verbose)
    with warnings.catch_warnings():  # restores the filters
        warnings.formatwarning = format_warning  # recorded warnings (pytest) are never formatted: theirs to show
        if verbose:
            project.addHandler(handler)
            project.setLevel(logging.DEBUG)
        else:
            for category in DEPRECATIONS:
                warnings.filterwarnings("ignore", category=category)
                warnings.filterwarnings("default", category=category, module=r"caption(\.|$)")  # ours still show
            for logger in note_loggers:
                logger.addFilter(left_out)
        try:
            yield
        finally:
            warnings.formatwarning = full_format
            _verbose.reset(token)
            project.removeHandler(handler)
            project.setLevel(old_level)
            for logger in note_loggers:
                logger.removeFilter(left_out)
