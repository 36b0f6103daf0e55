"""True messages on signals and quiet ends: SIGTERM before the first step claims no save,
Ctrl-C is one line in every command, and scoring without Java leaves no traceback behind."""

import math
import subprocess
import sys
import threading

import pytest
from kit.cli import REPO, caption
from kit.tiny import fit_args

from caption.cli import INTERRUPTED, TERMINATED, main
from caption.evaluation import meteor
from caption.inference import Captioner
from caption.training.module import CaptionModule

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


def test_sigterm_during_the_sanity_check_claims_no_save(tmp_path):
    run = tmp_path / "run"
    args = fit_args(run, "--data.eval_batch_size", "2", "--trainer.callbacks+=kit.probes.SigtermInSanityCheck")
    result = caption("fit", *args)  # 3 validation batches: stopped after the first
    output = result.stdout + result.stderr
    assert result.returncode == TERMINATED, output[-3000:]
    assert "SIGTERM: nothing saved (stopped before the first training step)" in output
    assert "saved" not in output.replace("nothing saved", "") and not list(run.rglob("*.ckpt"))


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt  # what Python raises in the main thread on Ctrl-C


@pytest.mark.parametrize("command", ["describe", "evaluate", "compare"])
def test_ctrl_c_is_one_line_in_every_command(tiny_runs, tmp_path, monkeypatch, capsys, command):
    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    monkeypatch.setattr(Captioner, "caption_batch", ctrl_c)
    args = {"describe": ["describe", "--ckpt_path", str(checkpoint), str(REPO / "docs" / "figures")],
            "evaluate": ["evaluate", "--ckpt_path", str(checkpoint)],
            "compare": ["compare", str(tiny_runs["soft"]), "--images", "0"]}[command]
    with pytest.raises(SystemExit) as stopped:
        main([*args, "--predictions.out", str(tmp_path / "out")])
    assert stopped.value.code == INTERRUPTED
    assert capsys.readouterr().err.strip().splitlines()[-1:] == ["caption: stopped by Ctrl-C"]


def test_ctrl_c_in_a_lightning_command_ends_without_a_traceback(tiny_runs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(CaptionModule, "predict_step", ctrl_c)
    with pytest.raises(SystemExit) as stopped:
        main(["predict", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"), "--data.predict", "test",
              "--predictions.out", str(tmp_path / "out"), "--trainer.enable_progress_bar", "false"])
    output = capsys.readouterr()
    assert stopped.value.code == 1 and "Traceback" not in output.err + output.out


def test_evaluate_without_java_ends_without_a_meteor_traceback(tiny_runs, tmp_path):
    result = caption("evaluate", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"),
                     "--predictions.out", str(tmp_path / "out"), env={"PATH": str(tmp_path / "no-bin")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "METEOR is missing" in result.stderr
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]


def test_a_hung_meteor_is_stopped_and_reaped_without_waiting_for_its_lock(monkeypatch):
    started = []

    class Hanging(meteor.Meteor):
        def __init__(self):  # a Java process that never answers
            self.meteor_p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.lock = threading.Lock()
            started.append(self.meteor_p)

    monkeypatch.setattr(meteor, "Meteor", Hanging)
    with pytest.warns(UserWarning, match="no answer within 0.5 s"):
        score = meteor.meteor_score({1: ["a red circle"]}, {1: ["a circle"]}, timeout=0.5)
    assert math.isnan(score)
    assert started[0].returncode is not None, "killed and reaped: no defunct process is left"
