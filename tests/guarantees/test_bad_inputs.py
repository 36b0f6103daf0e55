"""Bad images and bad inputs: `caption predict` and the `Captioner` API skip and name what
they cannot read and keep everything else; an input that is no image is refused by name before any work."""

import json
import re
import shutil
import sys

import pytest
import torch
from PIL import Image

from caption import Captioner
from caption.cli import main
from caption.data.sources.image_files import BadImageError
from caption.inference.inputs import Failure, ImageInputError

pytestmark = pytest.mark.slow  # the tiny runs (conftest.py)


@pytest.fixture(scope="module")
def captioner(tiny_runs) -> Captioner:
    return Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt", device="cpu")


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.png"
    Image.effect_noise((48, 40), 60).convert("RGB").save(path)
    return path


def bad_file(kind: str, folder, monkeypatch):
    """A file (or folder) that is no usable image, and the reason its message must give."""
    path = folder / f"bad-{kind}.jpg"
    if kind == "folder":
        path.mkdir()
        return path, "a folder, not an image file"
    if kind == "text":
        path.write_text("not a picture\n")
        return path, "not an image file"
    if kind == "empty":
        path.write_bytes(b"")
        return path, "empty file (0 bytes)"
    if kind == "missing":
        return path, "file not found"
    image = Image.effect_noise((64, 64), 60).convert("RGB")
    image.save(path, quality=95)
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        return path, "cannot decode"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2500)  # "bomb": 64x64 pixels over a limit of 2500
    return path, "decompression bomb"


@pytest.mark.parametrize("kind", ["folder", "text", "empty", "missing", "truncated", "bomb"])
def test_every_image_error_names_the_file(captioner, good, tmp_path, monkeypatch, kind):
    path, reason = bad_file(kind, tmp_path, monkeypatch)
    named, why = re.escape(str(path)), re.escape(reason)
    with pytest.raises(BadImageError, match=f"^{named}: .*{why}"):
        captioner(path)
    with pytest.raises(ImageInputError, match=f"^{named} \\(input 1\\): .*{why}") as error:
        captioner([good, path, good], batch_size=1)
    assert error.value.index == 1 and error.value.captions[0] is not None, "the caption finished before it is kept"
    with pytest.warns(UserWarning, match=f"skipping {named} \\(input 1\\): .*{why}"):
        captions = captioner([good, path, good], on_error="skip")
    assert captions[1] is None and captions[0].text == captions[2].text == captioner(good).text
    assert captions.failed == [Failure(1, str(path), captions.failed[0].reason)] and reason in captions.failed[0].reason


def test_one_unreadable_item_among_many_loses_no_finished_caption(captioner, good, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("a shopping list\n")
    with pytest.raises(ImageInputError, match=f"{text} \\(input 20\\).*the 16 captions finished before it") as error:
        captioner([good] * 20 + [text])
    assert sum(caption is not None for caption in error.value.captions) == 16
    with pytest.warns(UserWarning, match=f"skipping {text}"):
        captions = captioner([good] * 20 + [text], on_error="skip")
    assert len(captions) == 21 and captions[20] is None and all(c.text == captions[0].text for c in captions[:20])
    assert [failure.index for failure in captions.failed] == [20]


@pytest.mark.parametrize("item, error, says", [
    (7, TypeError, "input 0 (int 7): not an image"), (True, TypeError, "input 0 (bool True): not an image"),
    (None, TypeError, "input 0 (NoneType None): not an image"),
    (torch.tensor(3.0), ValueError, "input 0 (a torch.float32 tensor of shape ()): an image tensor is (3, H, W)"),
    ([torch.zeros(3, 8, 8), torch.zeros(3, 8, 8, dtype=torch.bool)], TypeError, "input 1 (a torch.bool tensor"),
])
def test_inputs_that_are_no_image_are_refused_by_name_before_any_work(captioner, monkeypatch, item, error, says):
    monkeypatch.setattr(Captioner, "caption_batch", lambda *args, **kwargs: pytest.fail("captioned something"))
    with pytest.raises(error) as raised:
        captioner(item)
    assert says in str(raised.value)


@pytest.mark.parametrize("options, says", [({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
                                           ({"batch_size": 2.5}, "got 2.5"), ({"on_error": "ignore"}, "on_error")])
def test_bad_call_options_are_a_value_error(captioner, good, options, says):
    with pytest.raises(ValueError, match=says):
        captioner([good], **options)


def test_predict_keeps_the_captions_of_every_batch_when_one_holds_only_unreadable_files(
        tiny_runs, good, tmp_path, monkeypatch, recwarn):
    monkeypatch.setattr(sys, "argv", ["caption"])
    folder = tmp_path / "from_a_mac"
    (folder / "nested").mkdir(parents=True)
    for index in range(3):
        shutil.copy(good, folder / f"IMG_{index}.png")
        (folder / f"._IMG_{index}.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")  # macOS metadata, not a PNG
    main(["predict", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"), "--data.predict", str(folder),
          "--data.eval_batch_size", "1", "--predictions.out", str(tmp_path / "out"),
          "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"])
    results = json.loads((tmp_path / "out" / "captions.json").read_text())
    assert [entry["file_name"] for entry in results] == [str(folder / f"IMG_{index}.png") for index in range(3)]
    warned = "\n".join(str(warning.message) for warning in recwarn)
    assert all(f"skipping {folder / f'._IMG_{index}.png'}: not an image file" in warned for index in range(3))
    assert f"folder {folder}: its 1 subfolders are not searched (nested)" in warned
