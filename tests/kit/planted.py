"""Modules planted on the import path that leave a marker file when imported: a test that a config, checkpoint or
exported folder naming them never imports them asserts the marker is absent."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def planted_modules(folder: Path, monkeypatch: pytest.MonkeyPatch, names: list[str], *,
                    classes: tuple[str, ...] = ("Thing",)) -> Iterator[Path]:
    """While inside, modules `names` (each defining `classes`) in folder/modules, on the import path, each of which
    creates folder/IMPORTED when imported; yields that marker's path. `sys.argv` is `caption` (not pytest's
    arguments); the modules a test imported on purpose are forgotten on the way out."""
    marker = folder / "IMPORTED"
    (folder / "modules").mkdir()
    body = "".join(f"class {name}: pass\n" for name in classes)
    for name in names:
        (folder / "modules" / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').close()\n{body}")
    monkeypatch.syspath_prepend(str(folder / "modules"))
    monkeypatch.setattr(sys, "argv", ["caption"])
    try:
        yield marker
    finally:
        for name in names:
            sys.modules.pop(name, None)
