"""The test suite itself: `timeout`'s SIGTERM ends a session even after an in-process Lightning
run left its SIGTERM handler installed (Lightning's handler only sets a flag), and no Java process outlives a test."""

import os
import signal
import subprocess
import sys
import time

import psutil
from kit.cli import PATIENCE_S, REPO

INNER = '''
import os, shutil, subprocess, time
from pathlib import Path

import psutil
from lightning import Trainer

HERE = Path(__file__).parent


def test_a_lightning_run_that_leaves_its_handlers():
    Trainer(logger=False, enable_checkpointing=False)._signal_connector.register_signal_handlers()  # never torn down


def test_java_left_running():
    java = HERE / "java"  # a process named java that runs on, as a METEOR scorer nobody stopped
    shutil.copy(shutil.which("sleep"), java)
    (HERE / "java.pid").write_text(str(subprocess.Popen([str(java), "600"]).pid))


def test_a_long_test():
    if not psutil.pid_exists(int((HERE / "java.pid").read_text())):
        print("java gone", flush=True)
    print("running", flush=True)
    time.sleep(600)


def test_never_reached():
    pass
'''


def test_sigterm_ends_the_suite_and_every_test_leaves_its_handlers_and_no_java(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-s", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        while not any("running" in line for line in lines) and session.poll() is None:
            lines.append(session.stdout.readline())
        started = time.monotonic()
        session.send_signal(signal.SIGTERM)  # as `timeout` sends it, not SIGKILL
        output = "".join(lines) + session.communicate(timeout=PATIENCE_S)[0]
    finally:
        if session.poll() is None:  # it did not stop: end it and what it started, as SIGKILL would
            for child in psutil.Process(session.pid).children(recursive=True):
                child.kill()
            session.kill()
            session.wait()
    assert session.returncode in (2, 128 + signal.SIGTERM), output[-3000:]
    assert time.monotonic() - started < 120, "ended promptly"
    assert "java gone" in output, "the java process left by a test was ended after it"
    assert "test_never_reached" not in output and "3 passed" not in output, output[-3000:]
