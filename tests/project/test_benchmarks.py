"""Every benchmark script starts: its imports resolve and its `--help` prints (a moved helper module breaks it here,
not in front of whoever reruns a figure). The scripts run in this process, as `python benchmarks/<name>.py --help`."""

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.glob("*.py") if "__main__" in path.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_benchmark_script_starts(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])  # as `python benchmarks/<name>.py` has it
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(script), run_name="__main__")
    assert stopped.value.code == 0
    assert "usage:" in capsys.readouterr().out
