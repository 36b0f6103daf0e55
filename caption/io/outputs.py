"""Where results go: every output folder is created and checked writable before any work starts, and
the project's own writes turn an `OSError` into one error line naming the path, so a run never
computes for hours and then loses everything at its first save.

Files are written atomically in their own folder (`write_atomically`: a temporary file beside the target,
flushed to disk, then renamed over it), so a failed or interrupted write leaves the previous file intact and
no partial file; on a full disk the message names the folder, the space the file needs and what is free. Figures
are rendered in memory first and written the same way. A write never follows a link out of its folder: the
temporary file is always a new file (never a link planted at its name), and the rename replaces a link at the
target itself, leaving whatever it pointed to untouched. A temporary file is named after its target, the process and
the host (`temporary_path`); one left by a process of this host that is gone (killed mid-write) is removed by the
next write to its folder (`remove_stale_temporaries`).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption.errors import CaptionError, size_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class OutputError(CaptionError):
    """An output location that cannot be created or written; the message names it."""


def free_space(folder: str | Path) -> int | None:
    """Bytes free for this user on the disk holding `folder` (None if it cannot be asked)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def cannot_write(path: str | Path, error: OSError, *, what: str = "", needed: int | None = None) -> OutputError:
    """The one-line error for a failed write to `path`; on a full disk it names the folder, the space the file needs
    (`needed` bytes, if known) and what is free there."""
    target = f"{what + ' ' if what else ''}{path}"
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"cannot write {target} ({error.strerror or error}): choose a writable location")
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    free = free_space(folder)
    sizes = ", ".join(part for part in (f"{size_text(needed)} needed" if needed is not None else "",
                                        f"{size_text(free)} free" if free is not None else "") if part)
    return OutputError(f"cannot write {target}: the disk holding {folder} is full ({error.strerror}"
                       f"{'; ' + sizes if sizes else ''}): free space there or write to another disk")


def host_tag() -> str:
    """This host's name as a temporary file's name takes it: its first label, characters other than letters, digits
    and '-' as '-', at most 32 of them."""
    label = socket.gethostname().split(".")[0]
    return re.sub(r"[^A-Za-z0-9-]", "-", label)[:32] or "host"


def temporary_path(path: Path) -> Path:
    """Where `write_atomically` writes `path` first: `.NAME.PID.HOST.tmp` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.{host_tag()}.tmp")


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (one of another user counts: it cannot be signalled, but it is there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):  # no process can have that number
        return False
    return True


SWEPT: set[str] = set()  # folders whose stale temporary files this process has removed
SWEEPING = threading.Lock()


def remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporary files of `write_atomically` in `folder` that a process of this host left and that is
    gone (killed mid-write); once per folder and process. Those of other hosts (a shared disk), whose processes this
    host cannot see, are left alone. Not on Windows, where signal 0 is a Ctrl-C event."""
    key = os.path.abspath(folder)
    with SWEEPING:
        if key in SWEPT or os.name == "nt":
            return
        SWEPT.add(key)
    left = re.compile(rf"\..+\.([0-9]{{1,12}})\.{re.escape(host_tag())}\.tmp")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        found = left.fullmatch(name)
        if found is not None and not process_alive(int(found.group(1))):
            try:
                os.unlink(os.path.join(folder, name))  # a link planted at that name: the link, not its target
            except OSError:  # gone meanwhile, or not ours to remove
                pass


def write_atomically(path: str | Path, data: bytes | memoryview, *, what: str = "") -> None:
    """Write `data` to `path` through a temporary file beside it (same folder, so the same disk), flushed to disk
    and renamed over `path`: a failure or an interruption leaves the previous `path` as it was and no partial
    file; the temporary files of writes killed before (`remove_stale_temporaries`) are removed first. An `OSError`
    becomes an `OutputError` naming `path` (`what` says what it is, e.g. "checkpoint")."""
    path = Path(path)
    temporary = temporary_path(path)
    remove_stale_temporaries(path.parent)
    try:
        if temporary.is_symlink() or temporary.is_file():  # left by an interrupted write of this process id, or planted
            temporary.unlink()
        with open(temporary, "wb", opener=new_file_only) as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            failure = cannot_write(path, error, what=what, needed=len(data))
            kept = f"; the previous {path.name} is kept as it was" if path.is_file() else ""
            raise OutputError(f"{failure}{kept}") from None
        raise
    sync_folder(path.parent)


def new_file_only(path: str, flags: int) -> int:
    """`os.open` for `open(..., opener=)`: creates the file, and fails if anything (a file, a link) is there."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)


def sync_folder(folder: Path) -> None:
    """Flush the folder's entry of a renamed file to disk (so the rename survives a power cut), where possible."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename itself is done
    finally:
        os.close(descriptor)


def writable_folder(path: str | Path, *, what: str) -> Path:
    """Create folder `path` (and its parents) and check that a file can be written in it.

    `what` names the setting in the message, e.g. "--predictions.out" or "trainer.default_root_dir".
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise cannot_write(folder, error, what=f"{what}: folder") from None
    return folder


def readable_name(name: str | os.PathLike[str]) -> str:
    """A file name (or path) as text any output takes: the bytes of a name that is not UTF-8 (which Python holds
    as surrogate escapes, e.g. b"latin\\xe9.png" as "latin\\udce9.png") written as \\xNN, the rest unchanged; for
    figure titles, captions.csv and the console."""
    text = os.fspath(name)
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte (from JSON, say): as \\udNNN
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_text(data: Any, **options: Any) -> str:
    """`json.dumps(data, ensure_ascii=False, **options)` that any UTF-8 writer takes: a file name that is not UTF-8
    keeps its surrogate escapes as JSON escapes ("latin\\udce9.png"), which `json.load` reads back as the same str
    (and `os.fsencode` turns into the file's bytes)."""
    text = json.dumps(data, ensure_ascii=False, **options)
    return LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def write_text(path: Path, text: str) -> None:
    """Write `path` atomically (`write_atomically`): an interruption never leaves half a file."""
    write_atomically(path, text.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    """`data` as JSON at `path`, atomically (`write_text`)."""
    write_text(path, json.dumps(data))


def save_figure(figure: Figure, path: Path, *, dpi: int = 100) -> None:
    """`figure.savefig(path)`, rendered in memory (the format from `path`'s suffix) and written with
    `write_atomically`: a full disk or an interruption leaves no partial figure."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.removeprefix(".").lower() or None, dpi=dpi)
    write_atomically(path, buffer.getbuffer(), what="figure")
