"""Running the `caption` command in tests, as a user does: in a subprocess or in this process, and reading its
one-line errors; `fit_args` is the smallest real training run (one epoch, 12 built-in images)."""

import subprocess
import sys
from pathlib import Path

import pytest
from tiny import tiny_args

from caption.cli import main

REPO = Path(__file__).resolve().parents[1]
# seconds a command may take before a test calls it hung: generous, because a test run niced on a busy 2-core machine
# may get a few per cent of a core (a 20-second command then takes minutes); a hang still ends the test
PATIENCE_S = 900


def fit_args(root: Path, *extra: str) -> list[str]:
    """One epoch of a tiny soft-attention model on 12 built-in images, checkpoints under `root`."""
    return [
        "--config", "shapes_soft",
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(root), "--trainer.logger.init_args.save_dir", str(root),
        *tiny_args(root.parent / "data", channels="[4, 8, 8]", batch_size=16, num_train=12, num_val=6, num_test=6),
        *extra,
    ]


def caption(*args: str, env: dict[str, str] | None = None, timeout: float = PATIENCE_S) -> subprocess.CompletedProcess:
    """`caption ARGS` in a subprocess: (exit status, stdout, stderr)."""
    return subprocess.run([sys.executable, "-m", "caption.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def one_line_error(text: str, *named: str) -> str:
    """The single `caption: error:` line of a failed command, which must name everything in `named`."""
    lines = [line for line in text.splitlines() if line.startswith("caption: error:")]
    assert len(lines) == 1 and "Traceback" not in text, text[-3000:]
    assert all(name in lines[0] for name in named), lines[0]
    return lines[0]


def failed(args: list[str]) -> str:
    """Run `caption ARGS` in this process; it must fail with one line, which is returned."""
    with pytest.raises(SystemExit) as exit_:
        main(args)
    return one_line_error(str(exit_.value.code))
