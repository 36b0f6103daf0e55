"""The code keeps pyproject.toml's line length ([tool.ruff] line-length), checked by ruff in caption/, tests/,
benchmarks/ and scripts/."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKED = ["caption", "tests", "benchmarks", "scripts"]


def test_no_line_is_longer_than_the_line_length_of_pyproject():
    """`ruff check --select E501` (the test extra installs ruff beside this Python), without writing its cache into
    the repository."""
    command = [str(Path(sys.executable).parent / "ruff"), "check", "--select", "E501", "--no-cache", *CHECKED]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
