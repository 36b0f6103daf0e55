"""A truncated or corrupt checkpoint: one line naming the file, wherever a checkpoint is read
(the Python API, every command, `--ckpt_path last`, `model.optimization.init_from`, `data.vocabulary_from`)."""

import sys
from pathlib import Path

import pytest
import torch
from kit.cli import failed
from kit.data import write_image
from kit.tiny import tiny_run_args

from caption.errors import CheckpointError
from caption.inference import Captioner

CUTS = 40  # cut points spread over the file: headers, pickle, every tensor record, the zip directory


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


@pytest.fixture
def truncated(tiny_runs, tmp_path) -> Path:
    """The soft tiny run's last.ckpt cut in half, as a full disk or an interrupted copy leaves it."""
    whole = (tiny_runs["soft"] / "checkpoints" / "last.ckpt").read_bytes()
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    path.write_bytes(whole[: len(whole) // 2])
    return path


def test_a_checkpoint_cut_anywhere_is_named_by_the_python_api(tiny_runs, tmp_path):
    whole = (tiny_runs["soft"] / "checkpoints" / "last.ckpt").read_bytes()
    path = tmp_path / "cut.ckpt"
    for cut in range(1, CUTS):
        path.write_bytes(whole[: len(whole) * cut // CUTS])
        with pytest.raises(CheckpointError) as error:
            Captioner.from_checkpoint(path, device="cpu")
        message = str(error.value)
        assert message.startswith(f"{path}: not a") and "checkpoint" in message and "\n" not in message, message


@pytest.mark.parametrize("command", ["evaluate", "describe", "compare", "test", "predict", "fit --ckpt_path last",
                                     "init_from", "vocabulary_from"])
def test_every_command_names_a_truncated_checkpoint_in_one_line(truncated, tmp_path, command):
    run = truncated.parent.parent
    lightning = tiny_run_args("soft", run, tmp_path / "data")
    args = {
        "evaluate": ["evaluate", "--ckpt_path", str(truncated), "--predictions.out", str(tmp_path / "out")],
        "describe": ["describe", "--ckpt_path", str(truncated), str(write_image(tmp_path / "photo.png")),
                     "--predictions.out", str(tmp_path / "out")],
        "compare": ["compare", str(truncated), "--predictions.out", str(tmp_path / "out")],
        "test": ["test", *lightning, "--ckpt_path", str(truncated)],
        "predict": ["predict", "--ckpt_path", str(truncated), "--data.predict", str(tmp_path)],
        "fit --ckpt_path last": ["fit", *lightning, "--ckpt_path", "last"],
        "init_from": ["fit", *lightning, "--model.optimization.init_from", str(truncated)],
        "vocabulary_from": ["test", *lightning, "--data.vocabulary_from", str(truncated)],
    }[command]
    line = failed(args)
    assert str(truncated) in line and "not a readable PyTorch checkpoint" in line, line


@pytest.mark.parametrize("hyperparameters", ["vocabulary", ["vocabulary"], 5, None],
                         ids=["string", "list", "number", "none"])
def test_a_checkpoint_whose_hyperparameters_are_not_a_mapping_is_named_in_one_line(hyperparameters, tmp_path):
    path = tmp_path / "odd.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": hyperparameters}, path)
    with pytest.raises(CheckpointError) as error:
        Captioner.from_checkpoint(path, device="cpu")
    assert str(error.value).startswith(f"{path}: not a checkpoint of this project (no mapping of hyperparameters")
    line = failed(["describe", "--ckpt_path", str(path), str(write_image(tmp_path / "photo.png")), "--predictions.out",
                   str(tmp_path / "out")])
    assert line.startswith(f"caption: error: {path}: not a checkpoint of this project"), line
