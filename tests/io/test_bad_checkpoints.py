"""A truncated or corrupt checkpoint: one line naming the file, wherever a checkpoint is read
(the Python API, every command, `--ckpt_path last`, `model.optimization.init_from`, `data.vocabulary_from`); a
flipped byte anywhere in its weights is caught by the zip's own checksums, which torch does not check; a checkpoint of
another layout (a format before this release) is refused in one line too."""

import struct
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from kit.cli import failed
from kit.data import write_image
from kit.models import tiny_module
from kit.tiny import tiny_run_args

from caption.errors import CheckpointError
from caption.inference import Captioner
from caption.io.class_paths import ForeignClassError
from caption.model.caption_model import checkpoint_state

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


def flipped(source: Path, target: Path) -> Path:
    """A copy of checkpoint `source` at `target` with one byte in the middle of its largest weight changed (a bit
    flipped on a disk, or in a copy), the zip's records otherwise as they were."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        record = max(archive.infolist(), key=lambda info: info.file_size)
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26: record.header_offset + 30])
    data[record.header_offset + 30 + name_length + extra_length + record.file_size // 2] ^= 0x40
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def test_a_flipped_byte_in_a_weight_is_named_in_one_line(tiny_runs, tmp_path):
    path = flipped(tiny_runs["soft"] / "checkpoints" / "last.ckpt", tmp_path / "run" / "checkpoints" / "last.ckpt")
    with pytest.raises(CheckpointError) as error:
        Captioner.from_checkpoint(path, device="cpu")
    message = str(error.value)
    assert message.startswith(f"{path}: not a readable PyTorch checkpoint: damaged: the bytes of its record ")
    assert "CRC-32" in message and "\n" not in message, message
    line = failed(["describe", "--ckpt_path", str(path), str(write_image(tmp_path / "photo.png")), "--predictions.out",
                   str(tmp_path / "out")])
    assert f"{path}: not a readable PyTorch checkpoint: damaged" in line, line


def test_a_flipped_byte_in_encoder_weights_is_named_in_one_line(tmp_path):
    weights = tmp_path / "encoder.pt"
    torch.save({"features.0.weight": torch.randn(64, 3, 3, 3)}, weights)
    damaged = flipped(weights, tmp_path / "damaged" / "encoder.pt")
    line = failed(["fit", *tiny_run_args("soft", tmp_path / "run", tmp_path / "data"), "--model.encoder.name", "vgg16",
                   "--model.encoder.weights", str(damaged)])
    assert f"cannot read encoder weights {damaged}: damaged" in line, line


def test_a_checkpoint_naming_a_model_class_is_refused_naming_it(tiny_runs, tmp_path):
    """`caption fit` records no model class; Lightning's `_class_path` in a checkpoint's settings is refused naming
    the checkpoint, by the Python API and `caption predict`, instead of "does not accept option model._class_path"."""
    checkpoint = torch.load(tiny_runs["soft"] / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["_class_path"] = "caption.training.module.CaptionModule"
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save(checkpoint, path)
    with pytest.raises(ForeignClassError, match=f"checkpoint {path}: hyper_parameters._class_path is 'caption"):
        Captioner.from_checkpoint(path, device="cpu")
    line = failed(["predict", "--ckpt_path", str(path), "--data.predict", str(tmp_path)])
    assert f"checkpoint {path}: hyper_parameters._class_path is" in line, line


def older_checkpoint(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A checkpoint of a tiny model in a layout this release does not read, and the start of its refusal: its model
    settings flat (`attention: soft`, `embed_dim: 8`), or its data source in a module of the project that does not
    exist."""
    vocabulary = ["<pad>", "<start>", "<end>", "<unk>", "a", "red", "circle"]
    module = tiny_module(vocabulary)
    path = tmp_path / f"{kind}.ckpt"
    if kind == "flat settings":
        settings = {"vocabulary": vocabulary, "attention": "soft", "encoder": "small_vgg", "embed_dim": 8}
        torch.save({"state_dict": checkpoint_state(module.state_dict()), "hyper_parameters": settings}, path)
        return path, (f"{path}: written by a format before this release (its model settings are not in groups: "
                      "hyper_parameters.encoder is 'small_vgg'), which is not read; retrain with `caption fit`")
    source = {"class_path": "caption.data.shapes.ShapesSource", "init_args": {}}
    torch.save({"state_dict": checkpoint_state(module.state_dict()), "hyper_parameters": dict(module.hparams),
                "datamodule_hyper_parameters": {"source": source}}, path)
    return path, (f"{path}: written by another version of caption (it names caption.data.shapes.ShapesSource, whose "
                  "module this release does not have), whose format is not read; retrain with `caption fit`")


@pytest.mark.parametrize("kind", ["flat settings", "a module that does not exist"])
def test_a_checkpoint_of_another_layout_is_refused_in_one_line(tmp_path, kind):
    path, refusal = older_checkpoint(tmp_path, kind)
    with pytest.raises(CheckpointError) as error:
        Captioner.from_checkpoint(path, device="cpu")
    assert str(error.value).startswith(refusal) and "\n" not in str(error.value), str(error.value)
    line = failed(["describe", "--ckpt_path", str(path), str(write_image(tmp_path / "photo.png")), "--predictions.out",
                   str(tmp_path / "out")])
    assert line.startswith(f"caption: error: {refusal}"), line
