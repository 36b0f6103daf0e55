"""Checkpoints: resuming a killed run, saving on SIGTERM, and refusing unsafe or foreign files.

The fault tests run `caption fit` in a subprocess, kill it, and resume it with `--ckpt_path last`;
`kit.probes.Probe` records what the resumed run starts from.
"""

import os
import signal
from pathlib import Path

import lightning as L
import pytest
import torch
from kit.cli import PATIENCE_S, caption, failed, start, wait_for
from kit.data import write_image
from kit.models import tiny_module
from kit.probes import checksum, optimizer_summary, read_probe, steps_done
from kit.tiny import HARD_FROM_SCRATCH, config, run_args, tiny_args

from caption.cli import TERMINATED
from caption.data.datamodule import CaptionDataModule
from caption.data.synthetic.shapes import ShapesSource
from caption.errors import CheckpointError
from caption.inference import Captioner, load_trained
from caption.io.checkpoints import SafeCheckpointIO, read_checkpoint


def tiny(root: Path) -> list[str]:
    """Hard attention (so the baseline is part of the state) at tiny sizes, no validation."""
    return [
        *config("shapes_hard"), *HARD_FROM_SCRATCH, *run_args(root),
        "--trainer.limit_val_batches", "0", "--trainer.callbacks+=kit.probes.Probe",
        *tiny_args(root / "data"),
    ]


@pytest.mark.slow
def test_killed_run_resumes_from_the_last_periodic_checkpoint(tmp_path):
    last = tmp_path / "checkpoints" / "last.ckpt"
    args = [*tiny(tmp_path), "--periodic_checkpoint.every_n_train_steps", "3"]
    first = start("fit", *args, "--trainer.max_steps", "1000", probe=tmp_path / "probe1")
    wait_for(last.exists, first)
    first.send_signal(signal.SIGKILL)  # no chance to save anything more
    first.wait()
    saved = torch.load(last, weights_only=True)
    step = saved["global_step"]
    assert step >= 3 and step % 3 == 0 and max(steps_done(tmp_path / "probe1")) >= step
    parameters = checksum(load_trained(last).module.parameters())

    resumed = caption("fit", *args, "--trainer.max_steps", str(step + 4), "--ckpt_path", "last",
                      probe=tmp_path / "probe2")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    records = read_probe(tmp_path / "probe2", 0)
    begin = next(record for record in records if record["event"] == "train_start")
    assert begin["global_step"] == step and begin["epoch"] == saved["epoch"]
    assert begin["baseline"] == saved["state_dict"]["objective.baseline.value"].item() != 0
    assert begin["parameters"] == parameters
    expected = optimizer_summary(saved["optimizer_states"][0])
    assert {name: begin[name] for name in expected} == expected and expected["optimizer_step"] == step
    assert steps_done(tmp_path / "probe2") == list(range(step + 1, step + 5)), "continues from the saved step"
    assert torch.load(last, weights_only=True)["global_step"] == step + 4


@pytest.mark.slow
def test_sigterm_saves_last_checkpoint_then_exits(tmp_path):
    last = tmp_path / "checkpoints" / "last.ckpt"
    args = [*tiny(tmp_path), "--periodic_checkpoint.every_n_train_steps", "0", "--trainer.max_steps", "1000"]
    process = start("fit", *args, probe=tmp_path / "probe")
    wait_for(lambda: len(steps_done(tmp_path / "probe")) >= 2, process)
    assert not last.exists()
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == TERMINATED, output[-4000:]
    assert "SIGTERM: saved" in output and "--ckpt_path last" in output
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == steps_done(tmp_path / "probe")[-1], "saved after the batch it was in"
    assert saved["optimizer_states"] and saved["state_dict"]["objective.baseline.value"] != 0


# ------------------------------------------------------------------------------------------ loading
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A real checkpoint: 2 steps of hard attention, in process."""
    root = tmp_path_factory.mktemp("checkpoint")
    data = CaptionDataModule(
        source=ShapesSource(root=str(root / "data"), num_train=10, num_val=2, num_test=2), batch_size=8
    )
    model = tiny_module(data.vocabulary, "hard")
    trainer = L.Trainer(
        max_steps=2, limit_val_batches=0, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(root / "model.ckpt")
    return root / "model.ckpt"


class Planted:
    """Unpickling this runs `touch <marker>`: what a malicious checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def malicious(checkpoint: Path, folder: Path) -> tuple[Path, Path]:
    """The real checkpoint with a planted object; returns (file, marker that must never appear)."""
    content = torch.load(checkpoint, weights_only=True)
    marker = folder / "code-was-run"
    content["hyper_parameters"]["note"] = Planted(marker)
    path = folder / "malicious.ckpt"
    torch.save(content, path)
    return path, marker


def test_load_trained_restores_model_and_vocabulary_and_leaves_the_baseline_to_training(checkpoint):
    module = load_trained(checkpoint).module
    saved = torch.load(checkpoint, weights_only=True)
    assert not module.training
    assert module.vocabulary.to_list() == saved["hyper_parameters"]["vocabulary"]
    assert module.settings.attention.kind == "hard" and module.settings.decoder.hidden_dim == 16
    assert saved["state_dict"]["objective.baseline.value"].item() != 0, "the checkpoint keeps the baseline"
    assert set(saved["state_dict"]) - set(module.state_dict()) == {"objective.baseline.value"}
    for name, value in module.state_dict().items():
        assert torch.equal(value, saved["state_dict"][name]), name


def test_malicious_pickle_is_refused_without_running_it(checkpoint, tmp_path):
    path, marker = malicious(checkpoint, tmp_path)
    for load in (load_trained, read_checkpoint, SafeCheckpointIO().load_checkpoint):
        with pytest.raises(CheckpointError, match="refused to load") as error:
            load(path)
        assert str(path) in str(error.value) and "posix.system" in str(error.value)
    assert not marker.exists()


def test_foreign_corrupt_and_missing_files_get_clear_messages(tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"weight": torch.zeros(2)}}, foreign)  # e.g. another project's Lightning checkpoint
    with pytest.raises(CheckpointError, match="not a checkpoint of this project") as error:
        load_trained(foreign)
    assert str(foreign) in str(error.value)

    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(foreign.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="not a readable PyTorch checkpoint") as error:
        read_checkpoint(truncated)
    assert str(truncated) in str(error.value)

    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        read_checkpoint(tmp_path / "missing.ckpt")


@pytest.mark.slow
def test_cli_refuses_a_malicious_checkpoint_with_a_clear_message(checkpoint, tmp_path):
    path, marker = malicious(checkpoint, tmp_path)
    result = caption("test", *tiny(tmp_path), "--ckpt_path", str(path), probe=tmp_path / "probe")
    assert result.returncode != 0
    assert f"caption: error: {path}: refused to load" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("image_size", [-5, "abc", 100000])
def test_a_data_image_size_no_image_can_have_is_one_line_naming_the_checkpoint_and_key(checkpoint, tmp_path,
                                                                                        image_size):
    content = torch.load(checkpoint, weights_only=True)
    content["datamodule_hyper_parameters"]["source"] = {  # as `caption fit` records it
        "class_path": "caption.data.synthetic.shapes.ShapesSource",
        "init_args": {"root": str(tmp_path / "data"), "num_train": 10, "image_size": image_size}}
    path = tmp_path / "edited.ckpt"
    torch.save(content, path)
    named = (f"{path}: datamodule_hyper_parameters.source.init_args.image_size is {image_size!r}, but the images of "
             "encoder small_vgg must have whole sides of")
    with pytest.raises(CheckpointError) as raised:
        Captioner.from_checkpoint(path, device="cpu")
    assert str(raised.value).startswith(named) and "\n" not in str(raised.value), raised.value
    images = write_image(tmp_path / "images" / "photo.png").parent
    line = failed(["predict", "--ckpt_path", str(path), "--data.predict", str(images),
                   "--predictions.out", str(tmp_path / "out")])
    assert named in line and not (tmp_path / "out").exists()
