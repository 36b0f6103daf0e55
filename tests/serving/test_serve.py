"""`caption serve`'s answers without a browser: the JSON the page gets for an image, the test images, and the one-line
errors of bad requests, from a server running in this process on untrained tiny models."""

import base64
import http.client
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from kit.cli import PATIENCE_S, failed
from kit.data import write_image
from kit.figures import word_axes
from kit.serving import MAX_UPLOAD_BYTES, request, serve, stop, tiny_captioner
from matplotlib import colormaps
from PIL import Image

from caption.data.synthetic.shapes import ShapesSource
from caption.evaluation.overlays import COLORMAP, HEAT_OPACITY, grey
from caption.reports.runs import Model
from caption.serving.viewer import AttentionViewer


@pytest.fixture
def server(tmp_path):
    models = [Model(kind, Path(f"{kind}.ckpt"), tiny_captioner(kind, tmp_path / "data", seed), None)
              for seed, kind in enumerate(("soft", "hard"))]
    server = serve(models, num_captions=2)
    yield server
    stop(server)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def decoded(data_url: str) -> np.ndarray:
    """The pixels of a PNG data: URL, (H, W, 3) uint8."""
    header, _, payload = data_url.partition(",")
    assert header == "data:image/png;base64"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(payload))).convert("RGB"))


def test_the_page_is_self_contained(server):
    status, page = request(server, "/")
    assert status == 200 and page.startswith(b"<!doctype html>")
    assert b"<script src" not in page and b"<link rel=\"stylesheet\"" not in page and b"https://" not in page


def test_about_lists_the_models_and_the_test_images_of_the_first_models_data(server, tmp_path):
    status, body = request(server, "/api/about")
    about = json.loads(body)
    assert status == 200
    assert [(model["name"], model["kind"]) for model in about["models"]] == [("soft", "soft"), ("hard", "hard")]
    assert about["num_captions"] == 2 and about["max_upload_bytes"] == MAX_UPLOAD_BYTES
    assert len(about["test_images"]) == 3 and all(test["references"] for test in about["test_images"])
    source = ShapesSource(root=str(tmp_path / "data"), num_train=4, num_val=2, num_test=3)
    record = next(record for record in source.records() if record.image_id == about["test_images"][0]["image_id"])
    status, thumbnail = request(server, "/api/test_images/0.png")
    expected = (source.image(record) * 0.25 + 0.5) * 255  # the built-in data's normalisation undone  (3, H, W)
    shown = torch.from_numpy(np.array(Image.open(io.BytesIO(thumbnail)))).permute(2, 0, 1).float()
    assert status == 200 and torch.allclose(shown, expected, atol=0.5), "the test image itself"


def test_an_uploaded_image_gets_each_models_ranked_captions_and_a_panel_per_word(server, tmp_path):
    photo = Image.open(write_image(tmp_path / "photo.png", size=(90, 70)))
    status, body = request(server, "/api/caption?num_captions=2&name=photo.png", png(photo))
    answer = json.loads(body)
    assert status == 200 and [model["name"] for model in answer["models"]] == ["soft", "hard"]
    assert len(answer["colours"]) > 2
    assert {model["vmax"] for model in answer["models"]} == {answer["vmax"]}, "one colour scale for every model"
    for model, served in zip(server.viewer.models, answer["models"]):
        expected = model.captioner(photo, num_captions=2)
        assert [caption["text"] for caption in served["captions"]] == [caption.text for caption in expected]
        assert served["size"] == [64, 64] and served["grid"] == [32, 32] and served["vmax"] > 0
        assert decoded(served["image"]).shape == (64, 64, 3)
        for caption, reference in zip(served["captions"], expected):
            assert caption["log_prob"] == pytest.approx(reference.log_prob, abs=1e-5)
            assert [word["word"] for word in caption["words"]] == reference.words
            for t, word in enumerate(caption["words"]):
                assert decoded(word["overlay"]).shape == (64, 64, 3)
                assert word["beta"] == pytest.approx(float(reference.beta[t]), abs=1e-6)
                columns = served["grid"][1]  # the encoder's grid: 32×32 cells for two blocks on a 64×64 input
                cell = None if reference.locations is None else list(divmod(int(reference.locations[t]), columns))
                assert word["cell"] == cell, "hard attention outlines the cell it chose"


def test_a_words_panel_is_the_panel_captioner_plot_draws(tmp_path):
    captioner = tiny_captioner("soft", None, seed=1)  # a seed whose caption has words
    captioner.precision = "32-true"  # the page's batch and the figure's: one rounding, that drawing cannot tell
    server = serve([Model("soft", Path("soft.ckpt"), captioner, None)])
    try:
        photo = Image.open(write_image(tmp_path / "photo.png", size=(80, 80), seed=2))
        answer = json.loads(request(server, "/api/caption?num_captions=1", png(photo))[1])
    finally:
        stop(server)
    words = answer["models"][0]["captions"][0]["words"]
    figure = captioner.plot(photo)
    assert words and len(word_axes(figure)) == len(words)
    under = grey(decoded(answer["models"][0]["image"]))[..., None] / 255
    for word, ax in zip(words, word_axes(figure)):
        heat = ax.get_images()[1]  # the figure's heat map of this word, on its colour scale
        drawn = HEAT_OPACITY * colormaps[COLORMAP](heat.norm(heat.get_array()))[..., :3] + (1 - HEAT_OPACITY) * under
        assert np.abs(decoded(word["overlay"]) - drawn * 255).max() <= 1, word["word"]


def test_bad_requests_get_one_line_messages_that_say_what_to_do(server, tmp_path):
    cases = [
        ("/api/caption?name=notes.png", b"not an image at all", 400, "notes.png: not an image file Pillow can read"),
        ("/api/caption?name=empty.png", b"", 400, "no image: drop an image file on the page"),
        ("/api/caption?name=big.png", b"x" * (MAX_UPLOAD_BYTES + 1), 413, "caption serve --max_upload_mb"),
        ("/api/caption?num_captions=0", png(Image.new("RGB", (8, 8))), 400, "num_captions must be between 1 and 10"),
        ("/api/caption?num_captions=two", png(Image.new("RGB", (8, 8))), 400, "num_captions must be a whole number"),
        ("/api/caption?test_image=7", b"", 400, "no test image 7: there are 3"),
        ("/api/test_images/-1.png", None, 400, "test image must be a whole number"),
        ("/api/nothing", None, 404, "no page /api/nothing"),
    ]
    for path, body, status, message in cases:
        got, answer = request(server, path, body)
        error = json.loads(answer)["error"]
        assert (got, message in error) == (status, True), (path, got, error)
        assert "\n" not in error and "Traceback" not in error
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=PATIENCE_S)
    connection.putrequest("POST", "/api/caption")  # no Content-Length
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 411 and "Content-Length" in json.loads(response.read())["error"]


def test_a_model_without_its_data_offers_no_test_images_and_says_why():
    model = Model("soft", Path("soft.ckpt"), tiny_captioner("soft", None, seed=0), None)
    about = AttentionViewer([model]).about()
    assert about["test_images"] == []
    assert about["test_images_problem"].startswith("no test images from the data of soft.ckpt: ")


def test_serve_names_a_missing_checkpoint_in_one_line(tmp_path):
    failed(["serve", "--ckpt_path", str(tmp_path / "missing.ckpt")])


def test_an_unforeseen_failure_is_one_line_on_the_page_and_its_traceback_in_the_console(server, monkeypatch, capfd):
    def fail(*args, **kwargs):
        raise RuntimeError("out of memory\nwhile decoding")

    monkeypatch.setattr(server.viewer, "caption_test_image", fail)
    status, body = request(server, "/api/caption?test_image=0", b"")
    assert (status, json.loads(body)) == (
        500, {"error": "the server failed: RuntimeError: out of memory while decoding"})
    assert "Traceback" in capfd.readouterr().err
