"""Where results go: every output folder is created and checked writable before any work starts, and
the project's own writes turn an `OSError` into one error line naming the path, so a run never
computes for hours and then loses everything at its first save.
"""

import os
import tempfile
from pathlib import Path

from matplotlib.figure import Figure

from caption.errors import CaptionError


class OutputError(CaptionError):
    """An output location that cannot be created or written; the message names it."""


def cannot_write(path: str | Path, error: OSError, *, what: str = "") -> OutputError:
    """The one-line error for a failed write to `path`."""
    reason = error.strerror or str(error)
    return OutputError(f"cannot write {what + ' ' if what else ''}{path} ({reason}): choose a writable location")


def writable_folder(path: str | Path, *, what: str) -> Path:
    """Create folder `path` (and its parents) and check that a file can be written in it.

    `what` names the setting in the message, e.g. "--out" or "trainer.default_root_dir".
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise cannot_write(folder, error, what=f"{what}: folder") from None
    return folder


def write_text(path: Path, text: str) -> None:
    """Write `path` atomically (temporary file + rename): an interruption never leaves half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        raise cannot_write(path, error) from None


def save_figure(figure: Figure, path: Path, *, dpi: int = 100) -> None:
    """`figure.savefig(path)`; an OSError becomes an OutputError naming `path`."""
    try:
        figure.savefig(path, dpi=dpi)
    except OSError as error:
        raise cannot_write(path, error) from None
