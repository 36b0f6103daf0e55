"""What `caption export` puts in config.json: nothing of the machine that trained the model (its paths are dropped or
made neutral, the training config keeps them), and a `preprocessing` that prepares an image exactly as `Captioner`
does."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import torchvision.transforms.functional as TF
from kit.data import write_image
from PIL import Image
from torchvision.transforms import InterpolationMode

from caption import Captioner
from caption.cli import main

pytestmark = pytest.mark.slow  # exports the tiny runs (conftest.py), trained once


def crafted_checkpoint(run: Path, out: Path, **changes: dict) -> Path:
    """The best checkpoint of `run` saved as `out`, its setting groups updated with `changes` ({"optimization": {...},
    "data": {...}}; "data" for the data module's)."""
    path = next((run / "checkpoints").glob("best-*.ckpt"))
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    for group, values in changes.items():
        if group == "data":
            checkpoint["datamodule_hyper_parameters"].update(values)
        else:
            checkpoint["hyper_parameters"][group] = {**checkpoint["hyper_parameters"][group], **values}
    torch.save(checkpoint, out)
    return out


def strings(value) -> list[str]:
    """Every string value of a JSON value (the keys are the format's names)."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return [value] if isinstance(value, str) else []


def by_hand(preprocessing: dict, image) -> torch.Tensor:
    """What a user outside this code makes of `image` from config.json's numbers, with torchvision alone."""
    resize = preprocessing["resize"]
    size = resize["size"] if isinstance(resize["size"], int) else list(resize["size"])
    resized = TF.resize(image, size, interpolation=InterpolationMode(resize["interpolation"]),
                        antialias=resize["antialias"])
    pixels = TF.to_tensor(TF.center_crop(resized, list(preprocessing["crop"]["size"])))  # RGB, 0..1
    return TF.normalize(pixels, preprocessing["mean"], preprocessing["std"])


def test_config_json_names_no_file_of_the_training_machine(tiny_runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run's working folder: relative paths below exist here
    (tmp_path / "stage1").mkdir()
    shutil.copy(tiny_runs["soft"] / "checkpoints" / "last.ckpt", tmp_path / "stage1" / "last.ckpt")
    (tmp_path / "features").mkdir()
    images = write_image(tmp_path / "photos" / "photo.png", size=(64, 64)).parent
    # the hard run's encoder.weights is the soft run's folder (absolute), its data root absolute (tiny_args)
    checkpoint = crafted_checkpoint(tiny_runs["hard"], tmp_path / "crafted.ckpt",
                                    optimization={"init_from": "stage1/last.ckpt"},
                                    data={"features": str(tmp_path / "features"), "predict": str(images),
                                          "vocabulary_from": "stage1/last.ckpt"})
    main(["export", "--ckpt_path", "crafted.ckpt", "--predictions.out", "model"])
    config = json.loads(Path("model/config.json").read_text())
    assert config["model"]["encoder"]["weights"] == "none", "its weights are in model.safetensors"
    assert config["model"]["optimization"]["init_from"] is None
    assert "root" not in config["data"]["source"]["init_args"], "the source's default applies"
    assert not {"features", "predict", "vocabulary_from"} & set(config["data"])
    machine = [text for text in strings(config) if os.path.isabs(text) or (text and Path(text).exists())]
    assert machine == []

    shared, trained = Captioner.from_pretrained("model", device="cpu"), Captioner.from_checkpoint(checkpoint,
                                                                                                  device="cpu")
    ours, theirs = shared(images / "photo.png"), trained(images / "photo.png")
    assert ours.words == theirs.words and ours.log_prob == theirs.log_prob
    assert torch.equal(ours.alpha, theirs.alpha)


def test_the_training_config_keeps_the_runs_paths(tiny_runs, tmp_path):
    main(["export", "--ckpt_path", str(tiny_runs["hard"]), "--predictions.out", str(tmp_path / "model")])
    soft_run = str(tiny_runs["soft"])
    assert soft_run in (tmp_path / "model" / "training_config.yaml").read_text(), "the run's encoder.weights, as is"
    assert soft_run not in (tmp_path / "model" / "config.json").read_text()


def test_an_old_folder_with_the_machines_paths_still_loads(exported, tiny_runs, tmp_path):
    """A folder exported before config.json left the paths out: its absolute root and encoder.weights load as then."""
    old = tmp_path / "old"
    shutil.copytree(exported["hard"], old)
    config = json.loads((old / "config.json").read_text())
    config["model"]["encoder"]["weights"] = str(tiny_runs["soft"])
    config["data"]["source"]["init_args"]["root"] = str(tmp_path / "data")
    del config["preprocessing"], config["sha256"]  # as written before either existed
    (old / "config.json").write_text(json.dumps(config))
    image = write_image(tmp_path / "photo.png", size=(70, 50))
    assert Captioner.from_pretrained(old, device="cpu")(image).words \
        == Captioner.from_pretrained(exported["hard"], device="cpu")(image).words


def test_preprocessing_prepares_an_image_as_the_captioner_of_the_built_in_data(exported, tmp_path):
    image = write_image(tmp_path / "photo.png", size=(90, 61))  # not the canvas's shape: resized, not cropped
    preprocessing = json.loads((exported["soft"] / "config.json").read_text())["preprocessing"]
    assert preprocessing["channel_order"] == "RGB" and preprocessing["value_range"] == [0.0, 1.0]
    prepared = Captioner.from_pretrained(exported["soft"], device="cpu").prepare(image)
    with Image.open(image) as file:
        expected = by_hand(preprocessing, file.convert("RGB"))
    assert expected.shape == prepared.shape == (3, 64, 64)
    torch.testing.assert_close(expected, prepared, atol=1e-5, rtol=0)
    assert "Inputs (config.json's `preprocessing`" in (exported["soft"] / "README.md").read_text()


def test_preprocessing_of_image_files_is_the_presets_and_their_paths_become_names(tiny_runs, tmp_path):
    """A source of image files (COCO's layout): the weights' preset resize and crop, its files by name alone."""
    coco = tmp_path / "data" / "coco"
    source = {"class_path": "caption.data.sources.karpathy.KarpathySource",
              "init_args": {"annotations": str(coco / "dataset_coco.json"), "images": str(coco / "images"),
                            "resize_size": 80, "crop_size": 64}}
    checkpoint = crafted_checkpoint(tiny_runs["soft"], tmp_path / "crafted.ckpt", data={"source": source})
    main(["export", "--ckpt_path", str(checkpoint), "--predictions.out", str(tmp_path / "model")])
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    init_args = config["data"]["source"]["init_args"]
    assert init_args["annotations"] == "dataset_coco.json" and init_args["images"] == "images"
    preprocessing = config["preprocessing"]
    assert preprocessing["resize"] == {"size": 80, "interpolation": "bilinear", "antialias": True}
    assert preprocessing["crop"]["size"] == [64, 64]
    assert preprocessing["mean"] == pytest.approx([0.485, 0.456, 0.406])  # VGG's ImageNet preset

    image = write_image(tmp_path / "photo.png", size=(120, 75))  # landscape: the height is resized to 80
    prepared = Captioner.from_pretrained(tmp_path / "model", device="cpu").prepare(image)
    with Image.open(image) as file:
        expected = by_hand(preprocessing, file.convert("RGB"))
    assert expected.shape == prepared.shape == (3, 64, 64)
    torch.testing.assert_close(expected, prepared, atol=1e-5, rtol=0)
