"""The record of who holds a lock, beside its lock file: a run that takes an operating-system lock (a fit's run
folder, a feature cache's build) writes {"host": ..., "pid": ...} once it holds it, and another run that finds the
lock taken names that process. The record is whatever a file of that name holds, so it is read as untrusted: without
following a link, a plain file only, at most HOLDER_BYTES of it, shown with a process id only when it is one and the
host's control characters escaped.
"""

import json
import os
import stat
from pathlib import Path
from typing import Any

from caption.errors import shown_text

HOLDER_BYTES = 4096  # the most of a holder record read: the host name and process id fit in far less
MAX_PID = 2**31 - 1  # the largest process id any system gives


def read_holder(path: Path) -> dict[str, Any] | None:
    """The record of who holds a lock (`holder_file`), read without following a link, from a plain file only and at
    most HOLDER_BYTES of it: None when it is absent, or anything but a JSON object."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        data = os.read(descriptor, HOLDER_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    try:
        record = json.loads(data.decode("utf-8")) if len(data) <= HOLDER_BYTES else None
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def holder_text(path: Path) -> str:
    """Who holds a run folder, as its record at `path` says, for a message: "process 4242 on lab-pc"; a process id
    that is not a whole number in the system's range is left out, and the host is shown with its control characters
    escaped (`shown_text`)."""
    if not path.exists() and not path.is_symlink():
        return "a process that is starting"  # it writes its record once it holds the lock
    record = read_holder(path) or {}
    pid, host = record.get("pid"), record.get("host")
    process = f"process {pid}" if type(pid) is int and 0 < pid <= MAX_PID else "a process"
    if isinstance(host, str) and host:
        return f"{process} on {shown_text(host)}"
    return process if process != "a process" else f"a process its {path.name} does not name"
