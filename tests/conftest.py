"""Shared fixtures: two tiny trained runs on the built-in data (soft and hard), through the real CLI; and what keeps
the suite itself from hanging: every test leaves the signal handlers as it found them and no Java process
behind, and SIGTERM (`timeout`'s) ends the session even while an in-process Lightning run holds its own handler."""

import os
import signal
import sys
import threading
from pathlib import Path
from unittest.mock import patch

import psutil
import pytest
from kit.tiny import encoder_from, tiny_run_args

from caption.cli import main


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"soft": run folder, "hard": run folder}, each with checkpoints/ and logs/version_0/metrics.csv."""
    root = tmp_path_factory.mktemp("tiny_runs")
    runs = {}
    with patch.object(sys, "argv", ["caption"]):  # not pytest's arguments
        for kind in ("soft", "hard"):  # the two-stage recipe: hard attention on the soft run's frozen encoder
            runs[kind] = root / kind
            stage_one = encoder_from(runs["soft"]) if kind == "hard" else []
            main(["fit", *tiny_run_args(kind, runs[kind], root / "data"), *stage_one])
    return runs



@pytest.fixture(scope="session")
def exported(tiny_runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"soft": folder, "hard": folder} written by `caption export` from the tiny runs."""
    root = tmp_path_factory.mktemp("exported")
    with patch.object(sys, "argv", ["caption"]):
        for kind in ("soft", "hard"):
            main(["export", "--ckpt_path", str(tiny_runs[kind]), "--predictions.out", str(root / kind)])
    return {kind: root / kind for kind in ("soft", "hard")}

# handlers a test may change: Lightning's signal connector (SIGTERM, SIGUSR1 on SLURM), its Ctrl-C shutdown (SIGINT
# ignored afterwards), `caption.training.callbacks.PeriodicCheckpoint` (SIGINT restored to the default during a save)
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
GRACE_S = 60  # after SIGTERM, how long the running test may take to end before the session is ended regardless
terminated: list[int] = []


def stray_java() -> list[psutil.Process]:
    """This process's `java` children still there (the PTB tokenizer's, METEOR's), running or defunct."""
    return [child for child in psutil.Process().children(recursive=True) if named(child) == "java"]


def named(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:  # gone meanwhile
        return ""


def end_children_and_exit(status: int) -> None:
    """End the session now: no test ended within GRACE_S of SIGTERM."""
    for child in psutil.Process().children(recursive=True):
        child.kill()
    os._exit(status)


def stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM ends the session: Ctrl-C's path (pytest stops and reports), then a watchdog if the test does not end.
    Lightning's own SIGTERM handler calls this one too, since it keeps the handler it found."""
    terminated.append(signum)
    watchdog = threading.Timer(GRACE_S, end_children_and_exit, args=(128 + signum,))
    watchdog.daemon = True
    watchdog.start()
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_sessionstart(session: pytest.Session) -> None:
    signal.signal(signal.SIGTERM, stop_on_sigterm)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`-n`), each worker and the `caption` processes its tests start get their share of the cores:
    two tests each with every core's worth of OpenMP threads spin against each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ["OMP_NUM_THREADS"] = threads
        import torch

        torch.set_num_threads(int(threads))


@pytest.fixture(autouse=True)
def leaves_no_handler_or_java_behind():
    """After each test: the signal handlers it found, no `java` child (killed and reaped); after SIGTERM, the end."""
    handlers = {signum: signal.getsignal(signum) for signum in HANDLED}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    for java in stray_java():
        try:
            java.kill()
            java.wait(timeout=30)  # reaped: no defunct `java` left
        except psutil.Error:
            pass
    if terminated:
        pytest.exit(f"stopped by signal {terminated[0]}", returncode=128 + terminated[0])
