"""Encoder weights taken from another run (`model.encoder.weights: runs/shapes_soft`): its checkpoint is read once,
through the checkpoint reader, with what older versions wrote upgraded there in one call, then loaded; the names of
`caption.model.encoder_weights` are still importable from `caption.model.encoder`, where they were first."""

import warnings

import torch

from caption.errors import CaptionWarning
from caption.io import checkpoints
from caption.model import encoder, encoder_weights
from caption.model.encoder import SmallVGG


def counting(monkeypatch, module, name: str) -> list[int]:
    """Calls of `module.name` from now on, counted (one 1 a call)."""
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_run_folders_checkpoint_is_read_and_upgraded_once(tmp_path, monkeypatch):
    trained = SmallVGG(channels=(4, 8))
    run = tmp_path / "run" / "checkpoints"
    run.mkdir(parents=True)
    torch.save({  # as caption 0.2.0's flat layout wrote it: settings of 0.1's flat keys, an old class path
        "state_dict": {f"encoder.{key}": value for key, value in trained.state_dict().items()},
        "hyper_parameters": {"vocabulary": ["<pad>", "<start>", "<end>", "<unk>"], "encoder": "small_vgg"},
        "datamodule_hyper_parameters": {"source": {"class_path": "caption.data.shapes.ShapesSource"}},
    }, run / "best-0.ckpt")
    reads = counting(monkeypatch, checkpoints, "read_checkpoint")
    upgrades = counting(monkeypatch, checkpoints, "upgraded")
    loaded = SmallVGG(channels=(4, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded.load_from_run(str(tmp_path / "run"))
    assert (len(reads), len(upgrades)) == (1, 1)
    moved = [str(warning.message) for warning in caught if issubclass(warning.category, CaptionWarning)]
    assert len(moved) == 1 and "caption.data.shapes.ShapesSource" in moved[0], moved
    for key, value in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_the_names_that_moved_are_still_importable_from_the_encoder():
    for name in ("EncoderWeightsError", "PRETRAINED_FILE", "pretrained_file"):
        assert getattr(encoder, name) is getattr(encoder_weights, name)
