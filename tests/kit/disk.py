"""A small disk for tests of full-disk behaviour: a real 1 MiB tmpfs where the test may mount one (root in a
container), else ENOSPC simulated by a write budget on the project's own file writes (`caption.io.outputs`), which is
where checkpoints, figures and results go. Use the `disk` fixture (import it into the test module)."""

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from caption.io import outputs


class Disk:
    """A folder on a small disk that `fill` leaves `free` bytes on: a 1 MiB tmpfs, or a simulated write budget."""

    def __init__(self, folder: Path, *, mounted: bool, monkeypatch: pytest.MonkeyPatch):
        self.folder, self.mounted, self.monkeypatch = folder, mounted, monkeypatch

    def fill(self, *, free: int) -> None:
        if self.mounted:
            filler = self.folder / "filler"
            filler.write_bytes(b"\0" * max(0, shutil.disk_usage(self.folder).free - free))
            return
        budget = [free]
        real_open = open

        def budgeted_open(file, mode="r", *args, **kwargs):  # outputs.write_atomically's temporary file
            handle = real_open(file, mode, *args, **kwargs)
            if "w" not in mode or not str(file).startswith(str(self.folder)):
                return handle
            write = handle.write

            def write_within_budget(data):
                if len(data) > budget[0]:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                budget[0] -= len(data)
                return write(data)

            handle.write = write_within_budget
            return handle

        self.monkeypatch.setattr(outputs, "open", budgeted_open, raising=False)


@pytest.fixture
def disk(tmp_path, monkeypatch) -> Iterator[Disk]:
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(folder)],
                             capture_output=True, check=False).returncode == 0
    try:
        yield Disk(folder, mounted=mounted, monkeypatch=monkeypatch)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)
