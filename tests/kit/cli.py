"""Running the `caption` command in tests, as a user does: in this process (`failed`, or `caption.cli.main` itself)
or in a subprocess (`caption`, `start`) where a test needs the process's own signals, exit status or Lightning's DDP
launcher; and reading its one-line errors."""

import contextlib
import functools
import io
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from caption.cli import main

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# seconds a command may take before a test calls it hung: generous, because a test run niced on a busy 2-core machine
# may get a few per cent of a core (a 20-second command then takes minutes); a hang still ends the test
PATIENCE_S = 900


def environment(probe: Path | None = None, changes: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with tests/ importable (for `kit.probes` callbacks), `changes` made and, with
    `probe`, the folder the probes write to (created)."""
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, **(changes or {})}
    if probe is not None:
        probe.mkdir(parents=True, exist_ok=True)
        env["CAPTION_PROBE_DIR"] = str(probe)
    return env


def caption(*args: str, probe: Path | None = None, env: dict[str, str] | None = None, cwd: Path = REPO,
            timeout: float = PATIENCE_S) -> subprocess.CompletedProcess:
    """`caption ARGS` in a subprocess run to its end, with the variables in `env` changed: (exit status, stdout,
    stderr)."""
    return subprocess.run([sys.executable, "-m", "caption.cli", *args], cwd=cwd, env=environment(probe, env),
                          capture_output=True, text=True, timeout=timeout, check=False)


def start(*args: str, probe: Path | None = None) -> subprocess.Popen:
    """`caption ARGS` started in a subprocess, stdout and stderr in one pipe (read it with `finish` or
    `communicate`)."""
    return subprocess.Popen([sys.executable, "-m", "caption.cli", *args], cwd=REPO, env=environment(probe),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, timeout: float = PATIENCE_S) -> None:
    """Wait until `condition()` holds while `process` runs; fail with its output if it ends first or hangs."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"caption ended early ({process.returncode}):\n{process.stdout.read()[-4000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("timed out")
        time.sleep(0.05)


def finish(process: subprocess.Popen) -> str:
    """The output of a started `caption`, which must succeed."""
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == 0, output[-4000:]
    return output


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


@functools.cache
def printed(*args: str) -> dict:
    """`caption fit *args --print_config`, in this process (a subprocess would start Lightning each time)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["fit", *args, "--print_config"])
    assert not done.value.code, done.value.code
    return yaml.safe_load(out.getvalue())
