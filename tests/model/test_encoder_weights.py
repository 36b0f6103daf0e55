"""Encoder weights taken from another run (`model.encoder.weights: runs/shapes_soft`): its checkpoint is read once,
through the checkpoint reader (`caption.io.encoder_weights`), then loaded into the encoder."""

import warnings

import torch

from caption.errors import CaptionWarning
from caption.io import checkpoints, encoder_weights
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


def test_a_run_folders_checkpoint_is_read_once(tmp_path, monkeypatch):
    trained = SmallVGG(channels=(4, 8))
    run = tmp_path / "run" / "checkpoints"
    run.mkdir(parents=True)
    torch.save({
        "state_dict": {f"encoder.{key}": value for key, value in trained.state_dict().items()},
        "hyper_parameters": {"vocabulary": ["<pad>", "<start>", "<end>", "<unk>"], "encoder": {"name": "small_vgg"}},
        "datamodule_hyper_parameters": {"source": {"class_path": "caption.data.synthetic.shapes.ShapesSource"}},
    }, run / "best-0.ckpt")
    reads = counting(monkeypatch, checkpoints, "read_checkpoint")
    loaded = SmallVGG(channels=(4, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded.load_from_run(str(tmp_path / "run"), reader=encoder_weights)
    assert len(reads) == 1
    said = [str(warning.message) for warning in caught if issubclass(warning.category, CaptionWarning)]
    assert not said, said
    for key, value in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
