"""Messages that say what is wrong and nothing misleading: the keys they name exist, hints fit the case, and the
project's warnings are one line without the source line."""

import pickle
import sys
import warnings

import numpy as np
import pytest
import torch
from kit.cli import failed
from PIL import Image

from caption.config.console import one_line_warning
from caption.data.sources.image_files import BadImageError, to_rgb
from caption.errors import CaptionWarning, CheckpointError, EncoderWeightsError
from caption.io import encoder_weights
from caption.io.checkpoints import read_checkpoint
from caption.model.encoder import SmallVGG


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


def test_a_pickle_of_another_protocol_is_refused_without_torchs_note_first(tmp_path, recwarn):
    path = tmp_path / "notes.ckpt"
    path.write_bytes(pickle.dumps({"notes": 1}, protocol=5))
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint"):
        read_checkpoint(path)
    assert not [warning for warning in recwarn if "pickle protocol" in str(warning.message)]


def test_an_empty_config_file_is_named_with_the_reason(tmp_path):
    config = tmp_path / "empty.yaml"
    config.write_text("# nothing yet\n")
    line = failed(["fit", "--config", str(config)])
    assert f"config file {config}: it holds no settings" in line, line


def test_an_all_nan_float_image_is_refused_not_captioned_black():
    image = Image.fromarray(np.full((8, 8), np.nan, dtype=np.float32), mode="F")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's cast warning would be an error here
        with pytest.raises(BadImageError, match="64 of its 64 pixels are NaN or infinite"):
            to_rgb(image)


def test_the_projects_warnings_print_as_one_line_without_the_source_line():
    line = one_line_warning("skipping a.png:\n not an image", CaptionWarning, "describe.py", 41, "warnings.warn(...)")
    assert line == "caption: warning: skipping a.png: not an image\n"
    lightning = "/venv/lib/python3.11/site-packages/lightning/pytorch/loops/fit_loop.py"
    assert one_line_warning("other\n  words", UserWarning, lightning, 321, None) == "lightning: warning: other words\n"


def encoder_error(weights) -> str:
    with pytest.raises(EncoderWeightsError) as error:
        SmallVGG(channels=(4, 8)).load_from_run(str(weights), reader=encoder_weights)
    return str(error.value)


def test_bad_encoder_weights_suggest_training_only_for_a_run_not_trained_yet(tmp_path):
    untrained = tmp_path / "run"
    untrained.mkdir()
    for missing in (untrained, tmp_path / "shapes_encoder"):  # a run folder without checkpoints, or none at all
        message = encoder_error(missing)
        assert "Train it first" in message and "caption pretrain-encoder --config shapes_encoder" in message
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    message = encoder_error(broken)
    assert "not a PyTorch checkpoint" in message or "not a readable" in message
    assert "Train it first" not in message
    planted = tmp_path / "encoder.pt"  # what pretrain-encoder writes, but of another encoder
    torch.save({"features.0.weight": torch.zeros(2, 3, 3, 3)}, planted)
    assert "does not fit this small_vgg" in encoder_error(planted)
