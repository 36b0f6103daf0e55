"""How figures were made (`caption.io.provenance`): the commit of a checkout and whether it was modified, unknown
without git or outside a checkout; the device's model; the training run's seed and precision from its saved config."""

import shutil
import subprocess

import pytest
import yaml

from caption.io.provenance import (
    Provenance, device_name, provenance, run_precision, run_seed, source_commit,
)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(folder, *arguments):
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *arguments], check=True,
                   capture_output=True)


@needs_git
def test_a_checkout_gives_its_commit_and_whether_a_tracked_file_was_modified(tmp_path):
    (tmp_path / "caption").mkdir()
    (tmp_path / "caption" / "module.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert source_commit(root=tmp_path) == (head, False)
    (tmp_path / "untracked.txt").write_text("not part of the code\n")
    assert source_commit(root=tmp_path) == (head, False), "an untracked file is no change to the code"
    (tmp_path / "caption" / "module.py").write_text("x = 2\n")
    assert source_commit(root=tmp_path) == (head, True)


@needs_git
def test_a_package_folder_inside_another_checkout_has_no_commit_of_its_own(tmp_path):
    git(tmp_path, "init", "-q")
    installed = tmp_path / "venv" / "site-packages"  # a wheel's install inside someone's repository
    installed.mkdir(parents=True)
    assert source_commit(root=installed) == (None, None)


def test_without_git_the_commit_is_unknown(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert source_commit(root=tmp_path) == (None, None)
    made = Provenance(precision="32-true", seed=None, commit=None, modified=None, device="cpu (a CPU)")
    assert made.line() == "precision 32-true, seed unknown, commit unknown, device cpu (a CPU)"
    assert made.record() == {"precision": "32-true", "seed": None, "commit": None, "modified": None,
                             "device": "cpu (a CPU)"}


def test_the_cpu_is_named_by_its_model():
    named = device_name(device="cpu")
    assert named.startswith("cpu (") and named != "cpu ()"
    assert provenance(precision="32-true", seed=3, device="cpu").device == named


def test_the_seed_and_precision_come_from_the_runs_saved_config(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "logs" / "version_0").mkdir(parents=True)
    checkpoint = run / "checkpoints" / "last.ckpt"
    checkpoint.write_bytes(b"")
    assert run_seed(checkpoint) is None and run_precision(checkpoint) is None, "no saved config: unknown"
    saved = run / "logs" / "version_0" / "config.yaml"
    saved.write_text(yaml.safe_dump({"seed_everything": 7, "trainer": {"precision": "bf16-mixed"}}))
    assert run_seed(checkpoint) == 7 and run_seed(run) == 7
    assert run_precision(checkpoint) == "bf16-mixed"
    saved.write_text(yaml.safe_dump({"seed_everything": True, "trainer": {}}))
    assert run_seed(checkpoint) is None, "not a seed"
    assert run_precision(checkpoint) == "auto", "unset: the default"
    alone = tmp_path / "alone.ckpt"
    alone.write_bytes(b"")
    assert run_seed(alone) is None and run_seed(None) is None
