"""The inference layer: `Captioner` on paths, PIL images and tensors (batched = one by one), the caption's
log-probability against a teacher-forced pass, downloads checked by SHA-256, and `caption predict` end to end."""

import functools
import hashlib
import http.server
import json
import shutil
import threading

import matplotlib.cbook
import pytest
import torch
from kit.cli import caption
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from caption import Caption, Captioner
from caption.cli import main
from caption.errors import CheckpointError

GRACE_HOPPER = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
pytestmark = pytest.mark.slow  # trains the tiny runs (conftest.py) once


@pytest.fixture(scope="module", params=["soft", "hard"])
def checkpoint(request, tiny_runs):
    return tiny_runs[request.param] / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """grace_hopper.jpg and two drawings, as files in a folder."""
    folder = tmp_path_factory.mktemp("images")
    Image.open(GRACE_HOPPER).save(folder / "grace_hopper.png")
    Image.new("RGB", (80, 50), (200, 30, 30)).save(folder / "red.jpg")
    Image.new("L", (40, 90), 128).save(folder / "gray.png")
    return folder


def test_three_lines_from_import_to_a_caption(tiny_runs):
    captioner = Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt")
    caption = captioner(GRACE_HOPPER)
    assert isinstance(caption, Caption) and caption.text == " ".join(caption.words)
    assert all(word in captioner.module.vocabulary.itos for word in caption.words)


def test_paths_pil_images_and_tensors_batched_equal_one_by_one(checkpoint, images):
    captioner = Captioner.from_checkpoint(checkpoint, device="cpu")
    files = sorted(images.iterdir())
    pil = [Image.open(file) for file in files]
    tensors = [pil_to_tensor(image.convert("RGB")) for image in pil]  # (3, H, W) uint8
    floats = [tensor.float() / 255 for tensor in tensors]  # (3, H, W) in [0, 1]
    one_by_one = [captioner(file) for file in files]
    for inputs in (files, [str(file) for file in files], pil, tensors, floats):
        batched = captioner(inputs, batch_size=2)  # two batches, one of 2 and one of 1
        assert [c.text for c in batched] == [c.text for c in one_by_one]
        for a, b in zip(batched, one_by_one):
            torch.testing.assert_close(a.alpha, b.alpha)
            torch.testing.assert_close(a.beta, b.beta)
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-5)
            assert (a.locations is None) == (b.locations is None)
            if a.locations is not None:
                assert torch.equal(a.locations, b.locations)


def test_a_caption_holds_what_each_word_looked_at(checkpoint):
    captioner = Captioner.from_checkpoint(checkpoint, device="cpu")
    caption = captioner(GRACE_HOPPER, beam_size=1, max_length=6)
    T = len(caption.words)
    assert 1 <= T <= 6 and caption.alpha.shape[0] == T and caption.beta.shape == (T,)
    torch.testing.assert_close(caption.alpha.sum(dim=1), torch.ones(T))
    locations = captioner.module.encoder(captioner.prepare(GRACE_HOPPER)[None]).shape[1]  # L
    assert caption.alpha.shape[1] == locations
    if captioner.module.settings.attention.kind == "hard":
        assert caption.locations.shape == (T,)
        assert torch.equal(caption.locations, caption.alpha.argmax(dim=1)), "hard decoding takes the argmax location"
    else:
        assert caption.locations is None


def test_log_prob_is_the_teacher_forced_log_likelihood(tiny_runs):
    """Greedy decoding's log p(caption | image), <end> included, equals the decoder's teacher-forced sum (both fp32)."""
    captioner = Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt", device="cpu",
                                          precision="32-true")
    module = captioner.module
    caption = captioner(GRACE_HOPPER, beam_size=1)
    image = captioner.prepare(GRACE_HOPPER)[None]  # (1, 3, H, W)
    ended = len(caption.words) < module.settings.decoding.max_caption_length  # else cut at the limit, with no <end>
    tokens = module.vocabulary.encode(caption.words)[: len(caption.words) + (2 if ended else 1)]
    with torch.no_grad():
        output = module.decoder(module.encoder(image), torch.tensor([tokens]))
    log_probs = output.logits.float().log_softmax(-1)  # (1, T, V)
    expected = log_probs[0, torch.arange(len(tokens) - 1), torch.tensor(tokens[1:])].sum()
    assert caption.log_prob == pytest.approx(float(expected), abs=1e-4)


def test_tensor_inputs_are_checked(tiny_runs):
    captioner = Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt", device="cpu")
    with pytest.raises(Exception, match=r"\(3, H, W\)"):
        captioner(torch.zeros(2, 3, 4, 5, 6))
    with pytest.raises(Exception, match=r"\[0, 1\]"):
        captioner(torch.full((3, 8, 8), 255.0))
    with pytest.raises(Exception, match="file path, a PIL image or a tensor"):
        captioner(3.5)


@pytest.fixture
def server(tmp_path):
    """A local HTTP server on 127.0.0.1 serving `tmp_path/served`; yields its base URL."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_with_the_right_hash_and_refused_with_a_wrong_one(tiny_runs, server, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    folder, url = server
    data = (tiny_runs["soft"] / "checkpoints" / "last.ckpt").read_bytes()
    (folder / "tiny.ckpt").write_bytes(data)
    sha256 = hashlib.sha256(data).hexdigest()
    cached = tmp_path / "torch_home" / "hub" / "checkpoints" / "tiny.ckpt"

    with pytest.raises(CheckpointError, match="refused: its SHA-256 is not"):
        Captioner.from_checkpoint(f"{url}/tiny.ckpt", sha256="0" * 64)
    assert not cached.exists(), "a file with the wrong hash is not kept"
    with pytest.raises(CheckpointError, match="expected SHA-256"):
        Captioner.from_checkpoint(f"{url}/tiny.ckpt")

    captioner = Captioner.from_checkpoint(f"{url}/tiny.ckpt", sha256=sha256, device="cpu")
    assert cached.read_bytes() == data
    local = Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt", device="cpu")
    assert captioner(GRACE_HOPPER).text == local(GRACE_HOPPER).text
    main(["describe", "--ckpt_path", f"{url}/tiny.ckpt", "--sha256", sha256, GRACE_HOPPER,
          "--predictions.out", str(tmp_path / "d")])
    assert json.loads((tmp_path / "d" / "captions.json").read_text())[0]["caption"] == local(GRACE_HOPPER).text
    (folder / "tiny.ckpt").unlink()  # the cached copy is used, not downloaded again
    assert Captioner.from_checkpoint(f"{url}/tiny.ckpt", sha256=sha256.upper(), device="cpu")(GRACE_HOPPER).text == \
        local(GRACE_HOPPER).text


def predict(*args: str) -> None:
    main(["predict", *args, "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
          "--trainer.accelerator", "cpu"])


def test_predict_a_folder_writes_file_names_and_the_api_captions(checkpoint, images, tmp_path):
    folder = tmp_path / "mixed"
    shutil.copytree(images, folder)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    with pytest.warns(UserWarning, match="skipping .*broken.jpg"):
        predict("--ckpt_path", str(checkpoint), "--data.predict", str(folder), "--predictions.out",
                str(tmp_path / "out"), "--model.decoding.beam_size", "2")
    results = json.loads((tmp_path / "out" / "captions.json").read_text())
    captioner = Captioner.from_checkpoint(checkpoint, device="cpu")
    files = sorted(file for file in folder.iterdir() if file.name != "broken.jpg")
    assert [entry["file_name"] for entry in results] == [str(file.resolve()) for file in files]
    assert [entry["caption"] for entry in results] == [c.text for c in captioner(files, beam_size=2)]


def test_predict_a_split_in_the_coco_results_format(tiny_runs, tmp_path):
    from pycocotools.coco import COCO

    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    predict("--ckpt_path", str(checkpoint), "--data.predict", "test", "--predictions.out", str(tmp_path / "out"))
    results = json.loads((tmp_path / "out" / "captions.json").read_text())
    main(["evaluate", "--ckpt", str(checkpoint), "--predictions.out", str(tmp_path / "eval")])  # the old spelling, kept
    evaluated = json.loads((tmp_path / "eval" / "captions.json").read_text())
    assert sorted(results, key=lambda entry: entry["image_id"]) == sorted(evaluated, key=lambda e: e["image_id"])
    coco = COCO()
    coco.dataset = {"images": [{"id": entry["image_id"]} for entry in results], "annotations": []}
    coco.createIndex()
    assert len(coco.loadRes(str(tmp_path / "out" / "captions.json")).getImgIds()) == len(results)


def test_predict_says_what_it_wrote_and_nothing_of_lightning(tiny_runs, tmp_path):
    """No device lines, seed, tips or warnings about the checkpoint's training-only state: only its own line."""
    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    done = caption("predict", "--ckpt_path", str(checkpoint), "--data.predict", "test",
                   "--trainer.enable_progress_bar", "false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (done.stdout + done.stderr).splitlines() == [
        "wrote 8 images' captions to runs/predict/captions.json and captions.csv"]


def test_predict_names_what_is_missing(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["predict", "--data.predict", str(tmp_path)])
    assert exit_.value.code == "caption: error: caption predict needs --ckpt_path: the checkpoint file to caption with"
