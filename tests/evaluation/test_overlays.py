"""Attention overlays (sec. 5.4) and `caption describe` on real and awkward images."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
import yaml
from kit.figures import GRACE_HOPPER, word_axes
from matplotlib.patches import Rectangle
from PIL import Image
from torchvision.transforms.functional import gaussian_blur

import caption.evaluation.overlays
from caption.cli import main
from caption.data.sources.karpathy import KarpathySource
from caption.data.synthetic.shapes import ShapesSource
from caption.evaluation.overlays import (LOCATION_CELLS, NAMED_BOX, Overlay, attention_map, comparison_figure,
                                         overlay_figure, to_uint8)


def overlay(words, *, grid=8, size=64, hard=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    alpha = torch.rand(len(words), grid * grid, generator=generator).softmax(-1)
    image = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    beta = torch.linspace(0.1, 0.9, len(words))
    location = alpha.argmax(-1) if hard else None
    return Overlay(image, list(words), alpha, beta, location, title=" ".join(words))


def test_attention_map_keeps_uniform_attention_uniform():
    smoothed = attention_map(torch.full((196,), 1 / 196), (224, 224))
    assert smoothed.shape == (224, 224)
    torch.testing.assert_close(smoothed, torch.full((224, 224), 1 / 196))


GRIDS = [((8, 8), (64, 64)), ((14, 14), (224, 224)), ((16, 16), (64, 64)), ((4, 8), (64, 128))]


@pytest.mark.parametrize("grid, size", GRIDS)
def test_attention_map_peaks_inside_the_attended_cell_for_every_cell(grid, size):
    cell_h, cell_w = size[0] / grid[0], size[1] / grid[1]
    smoothed = attention_map(torch.eye(grid[0] * grid[1]), size)  # all of α on one cell, for each cell
    assert smoothed.shape == (grid[0] * grid[1], *size)
    assert smoothed.min() >= 0 and float(smoothed.max()) < 0.5, "smoothed with a Gaussian, not just upsampled"
    for cell, one in enumerate(smoothed):
        y, x = divmod(int(one.argmax()), size[1])
        row, column = divmod(cell, grid[1])
        assert row * cell_h <= y < (row + 1) * cell_h and column * cell_w <= x < (column + 1) * cell_w, cell


def test_attention_map_is_torchvisions_gaussian_blur_of_the_bilinear_upsampling():
    alpha = torch.rand(3, 64).softmax(-1)
    upsampled = torch.nn.functional.interpolate(alpha.view(3, 1, 8, 8), size=(64, 64), mode="bilinear")
    expected = gaussian_blur(upsampled, kernel_size=[49, 49], sigma=[8.0, 8.0])  # σ = one 8-pixel cell; taps ±3σ
    torch.testing.assert_close(attention_map(alpha, (64, 64)), expected[:, 0])


def test_overlay_figure_has_one_panel_per_word_in_order_wrapped_into_rows():
    words = "a large red circle left of a small blue square and a green triangle".split()
    figure = overlay_figure(overlay(words), columns=5)
    panels = word_axes(figure)
    assert [ax.get_xlabel().split("\n")[0] for ax in panels] == words
    assert panels[0].get_xlabel() == "a\nβ = 0.10" and panels[-1].get_xlabel().endswith("β = 0.90")
    rows = sorted({round(ax.get_position().y0, 3) for ax in panels}, reverse=True)
    assert len(rows) == math.ceil((len(words) + 1) / 5) == 3
    assert figure.get_suptitle() == " ".join(words)
    images = [ax.get_images()[-1] for ax in panels]
    assert len({(im.norm.vmin, im.norm.vmax) for im in images}) == 1, "one colour scale for every panel"
    assert any(ax.get_label() == "<colorbar>" for ax in figure.axes)
    assert not any(isinstance(p, Rectangle) for ax in panels for p in ax.patches), "soft attention: no location"


def test_hard_attention_outlines_the_chosen_location():
    item = overlay(["a", "red", "square"], hard=True)
    panels = word_axes(overlay_figure(item))
    for t, ax in enumerate(panels):
        (box,) = [p for p in ax.patches if isinstance(p, Rectangle)]
        row, column = divmod(int(item.location[t]), 8)
        assert box.get_xy() == (column * 8 - 0.5, row * 8 - 0.5) and box.get_width() == 8


def test_the_markers_are_named_in_a_legend_under_the_image():
    """Hard attention's cell and the named object's box, each in the legend when drawn; soft draws neither. At test
    time hard attention's context is the expectation over α by default: its cell is argmax α, not a chosen one."""
    soft, hard = overlay(["a", "red", "circle"]), overlay(["a", "circle"], hard=True, seed=1)
    hard = dataclasses.replace(hard, boxes=[None, (8.0, 8.0, 24.0, 24.0)])
    figure = comparison_figure([soft, hard])
    images = [ax for ax in figure.axes if ax.get_label() != "word" and ax.get_images()]
    legends = [[text.get_text() for text in ax.get_legend().get_texts()] if ax.get_legend() else [] for ax in images]
    assert legends == [[], [NAMED_BOX, LOCATION_CELLS["expected"]]]
    assert legends[1][1].startswith("argmax α") and "expectation" in legends[1][1] and "chose" not in legends[1][1]
    sampled = comparison_figure([dataclasses.replace(hard, context="sample")])
    texts = [text.get_text() for ax in sampled.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
    assert texts == [NAMED_BOX, "the cell hard attention sampled"]


def test_comparison_figure_shows_each_model_with_one_scale(tmp_path):
    soft, hard = overlay(["a", "red", "circle"]), overlay(["a", "circle"], hard=True, seed=1)
    figure = comparison_figure([soft, hard])
    assert len(word_axes(figure)) == 5
    assert len({ax.get_images()[-1].norm.vmax for ax in word_axes(figure)}) == 1
    figure.savefig(tmp_path / "c.png")
    assert Image.open(tmp_path / "c.png").size[0] > 100


def test_to_uint8_inverts_the_normalisation():
    pixels = torch.randint(0, 256, (3, 5, 7)).float()
    normalised = (pixels / 255 - 0.5) / 0.25
    assert np.array_equal(to_uint8(normalised, (0.5,) * 3, (0.25,) * 3), pixels.permute(1, 2, 0).numpy())


def test_new_images_get_the_training_data_transform(tmp_path):
    photo = Image.open(GRACE_HOPPER).convert("RGB")  # 512 x 600, not square
    preset = KarpathySource(annotations="absent.json", images="absent")  # reads no file until asked for records
    assert preset.inference_transform()(photo).shape == (3, 224, 224)
    assert preset.normalization == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    smaller = KarpathySource(annotations="absent.json", images="absent", resize_size=160, crop_size=128)
    assert smaller.inference_transform()(photo).shape == (3, 128, 128)
    shapes = ShapesSource(root=str(tmp_path), num_train=2, num_val=1, num_test=1, image_size=48)
    assert shapes.inference_transform()(photo).shape == (3, 48, 48)
    assert shapes.normalization == ((0.5,) * 3, (0.25,) * 3)
    image = shapes.image(shapes.records()[0])  # (3, 48, 48), as training sees it
    saved = Image.fromarray(to_uint8(image, *shapes.normalization))  # the same image as a file would hold it
    torch.testing.assert_close(shapes.inference_transform()(saved), image)


def awkward_images(folder):
    """Grayscale, RGBA, palette, 16-bit and 1x1 images, plus a file that is not an image."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (40, 30), dtype=np.uint8), "L").save(folder / "gray.png")
    Image.fromarray(rng.integers(0, 256, (20, 50, 4), dtype=np.uint8), "RGBA").save(folder / "rgba.png")
    Image.fromarray(rng.integers(0, 256, (33, 33, 3), dtype=np.uint8)).convert("P").save(folder / "palette.gif")
    Image.fromarray(rng.integers(0, 65535, (16, 16), dtype=np.uint16)).save(folder / "deep.tif")
    Image.new("RGB", (1, 1), (200, 10, 10)).save(folder / "tiny.jpg")
    (folder / "notes.txt").write_text("not an image")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    return ["deep", "gray", "palette", "rgba", "tiny"]


@pytest.mark.slow
def test_describe_photographs_awkward_images_and_a_folder(tiny_runs, tmp_path, monkeypatch, capsys):
    figures = []

    def recording_figure(item, **kwargs):
        figures.append((item, overlay_figure(item, **kwargs)))
        return figures[-1][1]

    # describe imports it when it runs
    monkeypatch.setattr(caption.evaluation.overlays, "overlay_figure", recording_figure)
    expected = awkward_images(tmp_path / "images")
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="broken.jpg"):
        main(["describe", "--ckpt", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"), GRACE_HOPPER,
              str(tmp_path / "images"), "--predictions.out", str(out), "--data.eval_batch_size", "2"])
    captions = json.loads((out / "captions.json").read_text())
    assert [entry["file_name"].rsplit("/", 1)[1].split(".")[0] for entry in captions] == ["grace_hopper", *expected]
    printed = capsys.readouterr().out
    for entry, (item, figure) in zip(captions, figures):
        assert f"{entry['file_name']}: {entry['caption']}" in printed
        assert (out / entry["figure"].rsplit("/", 1)[1]).is_file()
        assert Image.open(entry["figure"]).format == "PNG"
        assert item.image.shape == (64, 64, 3), "resized to the size the model was trained on"
        assert [ax.get_xlabel().split("\n")[0] for ax in word_axes(figure)] == entry["caption"].split()
    assert any(entry["caption"] for entry in captions), "the tiny model says something"


def checkpoint_data(checkpoint):
    """The `data:` section a training config would have, from what `caption fit` stored in the checkpoint."""
    settings = torch.load(checkpoint, weights_only=True)["datamodule_hyper_parameters"]
    return {key: value for key, value in settings.items()
            if key not in ("_instantiator", "encoder", "encoder_weights", "freeze_encoder")}


@pytest.mark.slow
def test_describe_errors_name_the_file(tiny_runs, tmp_path, capsys):
    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    for inputs, message in [
        ([str(tmp_path / "broken.jpg")], "broken.jpg"),
        ([str(tmp_path / "missing.jpg")], "missing.jpg: no such image file or folder"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["describe", "--ckpt", str(checkpoint), *inputs, "--predictions.out", str(tmp_path / "out")])
        assert exit_.value.code.startswith("caption: error: ") and message in exit_.value.code

    old = torch.load(checkpoint, weights_only=True)
    del old["datamodule_hyper_parameters"]  # as written before checkpoints stored their data settings
    torch.save(old, tmp_path / "old.ckpt")
    with pytest.raises(SystemExit) as exit_:
        main(["describe", "--ckpt_path", str(tmp_path / "old.ckpt"), GRACE_HOPPER,
              "--predictions.out", str(tmp_path / "out")])
    assert "pass the training config (--config)" in exit_.value.code
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"data": checkpoint_data(checkpoint)}))
    main(["describe", "--ckpt_path", str(tmp_path / "old.ckpt"), GRACE_HOPPER,
          "--predictions.out", str(tmp_path / "out"), "--config", str(config)])
    assert (tmp_path / "out" / "grace_hopper.png").is_file()
