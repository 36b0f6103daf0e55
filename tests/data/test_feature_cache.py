"""The feature cache: what it reads equals what the encoder computes (within fp16), a cache that does not
match the config is refused, an interrupted build resumes, bad images stop or are skipped and listed, and
`caption features` + `caption fit` run through the CLI without touching the CNN during training."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from kit.data import karpathy_dataset, vgg16_weights, write_bad_files

from caption.cli import main
from caption.data.datamodule import CaptionDataModule
from caption.data.features import FeatureCache, FeatureCacheError, build_cache, cache_config
from caption.data.sources.image_files import BadImageError
from caption.data.sources.karpathy import KarpathySource
from caption.io import encoder_weights
from caption.model.encoder import TorchvisionVGG

REPO = Path(__file__).resolve().parents[2]
SIZES = {"resize_size": 36, "crop_size": 32}  # VGG16 on 32x32 crops: 2x2 = 4 annotation vectors, fast on a CPU


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    return root, karpathy_dataset(root), vgg16_weights(root / "vgg16-random.pth")


def source_of(root, annotations, **kwargs):
    return KarpathySource(annotations=str(annotations), images=str(root / "images"), **{**SIZES, **kwargs})


def config_of(source, weights, records=None, encoder="vgg16"):
    records = source.records() if records is None else records
    return cache_config(encoder=encoder, weights=str(weights), freeze=True, source=source, records=records)


def build(folder, source, weights, *, encoder=None, on_bad_image="error", batch_size=4):
    encoder = encoder or TorchvisionVGG(name="vgg16", weights=str(weights), reader=encoder_weights)
    return build_cache(str(folder), encoder=encoder, config=config_of(source, weights), source=source,
                       records=source.records(), on_bad_image=on_bad_image, batch_size=batch_size, num_workers=0,
                       device=torch.device("cpu"))


class Counting(torch.nn.Module):
    """An encoder that counts the images it encodes and can fail at a given call (an interruption)."""

    def __init__(self, encoder, fail_at=None):
        super().__init__()
        self.encoder, self.fail_at, self.calls, self.images = encoder, fail_at, 0, 0

    def forward(self, images):
        self.calls += 1
        if self.calls == self.fail_at:
            raise KeyboardInterrupt("interrupted")
        self.images += images.shape[0]
        return self.encoder(images)


def test_cache_round_trip(dataset, tmp_path):
    root, annotations, weights = dataset
    source = source_of(root, annotations)
    manifest = build(tmp_path / "cache", source, weights)
    assert manifest["complete"] and manifest["skipped"] == [] and manifest["shape"] == [9, 4, 512]
    assert manifest["encoder"] == "vgg16" and len(manifest["weights"]["sha256"]) == 64
    assert manifest["transform"]["crop_size"] == [32] and manifest["transform"]["mean"] == [0.485, 0.456, 0.406]
    assert manifest["images"] == [[r.image_id, r.file] for r in source.records()]
    assert not (tmp_path / "cache" / "progress.json").exists()

    cache = FeatureCache(str(tmp_path / "cache"), config_of(source, weights))
    encoder = TorchvisionVGG(name="vgg16", weights=str(weights), reader=encoder_weights)
    with torch.no_grad():
        computed = encoder(torch.stack([source.image(r) for r in source.records()]))  # (9, 4, 512)
    read = torch.stack([cache.annotations(r.image_id) for r in source.records()])
    assert read.dtype == torch.float16 and read.shape == computed.shape
    torch.testing.assert_close(read.float(), computed, rtol=1e-3, atol=1e-3 * computed.abs().max().item())
    assert computed.abs().max() > 0.1, "non-trivial features"


def test_the_build_shows_a_progress_bar_with_the_time_left(dataset, tmp_path, capsys):
    root, annotations, weights = dataset
    build(tmp_path / "cache", source_of(root, annotations), weights, batch_size=4)
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    done = [line for line in bar if line.startswith("features: 100%")]
    assert done and "| 9/9 [" in done[-1] and "<00:00" in done[-1] and "image" in done[-1], bar


def test_training_and_evaluation_batches_read_the_cache(dataset, tmp_path):
    root, annotations, weights = dataset
    source = source_of(root, annotations)
    build(tmp_path / "cache", source, weights)
    cache = FeatureCache(str(tmp_path / "cache"), config_of(source, weights))

    def data(workers):
        return CaptionDataModule(source=source_of(root, annotations), batch_size=4, eval_batch_size=2,
                                 num_workers=workers, features=str(tmp_path / "cache"), encoder_weights=str(weights))

    batch = next(iter(data(0).train_dataloader()))
    assert "image" not in batch and batch["annotations"].shape == (4, 4, 512)
    for row, image_id in zip(batch["annotations"], batch["image_id"].tolist()):
        assert torch.equal(row, cache.annotations(image_id))
    single = [b["annotations"] for b in data(0).test_dataloader()]
    several = [b["annotations"] for b in data(2).test_dataloader()]  # workers map the file themselves
    assert len(single) == 1 and all(torch.equal(a, b) for a, b in zip(single, several))


def test_a_stale_cache_is_refused_with_the_command_to_rebuild_it(dataset, tmp_path):
    root, annotations, weights = dataset
    source = source_of(root, annotations)
    build(tmp_path / "cache", source, weights)
    other_weights = vgg16_weights(tmp_path / "other.pth", seed=1)
    stale = {
        "transform": config_of(source_of(root, annotations, crop_size=48), weights),
        "image list": config_of(source_of(root, annotations, restval="drop"), weights),
        "weights": config_of(source, other_weights),
        "encoder": config_of(source, weights, encoder="vgg19"),
    }
    for what, config in stale.items():
        with pytest.raises(FeatureCacheError, match=what) as error:
            FeatureCache(str(tmp_path / "cache"), config)
        assert "caption features --config" in str(error.value)
    with pytest.raises(FeatureCacheError, match="no feature cache in .*caption features --config"):
        FeatureCache(str(tmp_path / "absent"), config_of(source, weights))
    for wrong, message in ({"weights": "none"}, "fixed encoder weights"), ({"freeze": False}, "frozen encoder"):
        arguments = {"encoder": "vgg16", "weights": str(weights), "freeze": True, **wrong}
        with pytest.raises(FeatureCacheError, match=message):
            cache_config(**arguments, source=source, records=source.records())


def test_an_interrupted_build_resumes(dataset, tmp_path):
    root, annotations, weights = dataset
    source = source_of(root, annotations)
    vgg = TorchvisionVGG(name="vgg16", weights=str(weights), reader=encoder_weights)
    interrupted = Counting(vgg, fail_at=3)  # call 1 sizes the array, call 2 encodes rows 0-3, call 3 fails
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path / "cache", source, weights, encoder=interrupted)
    progress = json.loads((tmp_path / "cache" / "progress.json").read_text())
    assert progress["done"] == 4 and interrupted.images == 1 + 4
    with pytest.raises(FeatureCacheError, match="unfinished"):
        FeatureCache(str(tmp_path / "cache"), config_of(source, weights))

    resumed = Counting(vgg)
    build(tmp_path / "cache", source, weights, encoder=resumed)
    assert resumed.images == 9 - 4, "only the rows not yet written are encoded"
    build(tmp_path / "whole", source, weights, batch_size=9)
    again = Counting(vgg)
    build(tmp_path / "cache", source, weights, encoder=again)
    assert again.calls == 0, "an up-to-date cache is left alone"
    finished = np.load(tmp_path / "cache" / "annotations.npy").astype(np.float32)
    whole = np.load(tmp_path / "whole" / "annotations.npy").astype(np.float32)
    np.testing.assert_allclose(finished, whole, rtol=2e-3, atol=1e-3 * np.abs(whole).max())


def dataset_with_bad_images(root: Path, annotations: Path, bad: list[str]) -> Path:
    """The fixture dataset plus one training image per name in `bad` (files from `write_bad_files`)."""
    files = write_bad_files(root / "images" / "bad")
    data = json.loads(annotations.read_text(encoding="utf-8"))
    for index, name in enumerate(bad):
        data["images"].append({"filepath": "bad", "filename": files[name].name, "split": "train", "imgid": 100 + index,
                               "cocoid": 5000 + index, "sentences": [{"raw": f"a bad {name} image"}]})
    path = root / f"dataset_{'_'.join(bad)}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_bad_images_stop_the_build_or_are_skipped_and_listed(dataset, tmp_path, caplog):
    root, annotations, weights = dataset
    header_bad = source_of(root, dataset_with_bad_images(root, annotations, ["missing", "tiny"]))
    with pytest.raises(BadImageError, match="2 of 11 images cannot be used") as error:
        build(tmp_path / "header", header_bad, weights)
    assert "missing.jpg (image 5000, train): file not found" in str(error.value)
    assert "tiny.png (image 5001, train): 1x1 pixels" in str(error.value)

    truncated = source_of(root, dataset_with_bad_images(root, annotations, ["truncated"]))
    with pytest.raises(BadImageError, match=r"truncated.jpg \(image 5000, train\): cannot decode"):
        build(tmp_path / "decode", truncated, weights)  # found while encoding
    with pytest.warns(UserWarning, match="leaving out 1 of 10 images.*truncated.jpg"):
        manifest = build(tmp_path / "decode", truncated, weights, on_bad_image="skip")
    assert [entry["image_id"] for entry in manifest["skipped"]] == [5000]
    assert "cannot decode" in manifest["skipped"][0]["reason"]

    def data(policy):
        return CaptionDataModule(source=truncated, batch_size=4, features=str(tmp_path / "decode"),
                                 encoder_weights=str(weights), on_bad_image=policy)

    with pytest.warns(UserWarning, match="leaving out 1 of 10 images"):
        assert 5000 not in {r.image_id for r in data("skip").usable("train")}
    with pytest.raises(BadImageError, match="truncated.jpg"):
        data("error").train_dataloader()


def test_bad_images_without_a_cache_are_found_before_training(dataset):
    root, annotations, _ = dataset
    source = source_of(root, dataset_with_bad_images(root, annotations, ["empty", "text", "bomb", "truncated"]))
    header = CaptionDataModule(source=source, batch_size=4)
    with pytest.raises(BadImageError, match="3 of 13 images cannot be used") as error:
        header.train_dataloader()
    assert all(name in str(error.value) for name in ("empty.jpg", "text.jpg", "bomb.png"))
    decode = CaptionDataModule(source=source, batch_size=4, check_images="decode", on_bad_image="skip")
    with pytest.warns(UserWarning, match="leaving out 4 of 13 images"):
        records = decode.usable("train")
    assert len(records) == 5 and all(record.image_id < 5000 for record in records)


def write_config(tmp_path, root, annotations, weights) -> Path:
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "max_steps": 3, "limit_val_batches": 1, "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "default_root_dir": str(tmp_path / "run"),
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                       "init_args": {"save_dir": str(tmp_path / "run"), "name": "logs"}},
        },
        "model": {"encoder": {"name": "vgg16", "weights": str(weights)},
                  "decoder": {"embed_dim": 8, "hidden_dim": 16, "init_layers": 1},
                  "attention": {"dim": 8, "layers": 1}, "decoding": {"max_caption_length": 6, "beam_size": 2}},
        "data": {
            "source": {"class_path": "caption.data.sources.karpathy.KarpathySource",
                       "init_args": {"annotations": str(annotations), "images": str(root / "images"), **SIZES}},
            "batch_size": 4, "eval_batch_size": 4, "same_length_batches": True,
            "features": str(tmp_path / "features"),
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_features_then_fit_through_the_cli(dataset, tmp_path, monkeypatch, caplog):
    root, annotations, weights = dataset
    config = write_config(tmp_path, root, annotations, weights)
    main(["features", "--config", str(config)])
    manifest = json.loads((tmp_path / "features" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["shape"] == [9, 4, 512]
    with caplog.at_level(logging.INFO):
        main(["features", "--config", str(config)])
    assert "is up to date" in caplog.text

    def no_cnn(self, images):
        raise AssertionError("the CNN ran although the feature cache holds the annotations")

    monkeypatch.setattr(TorchvisionVGG, "forward", no_cnn)
    main(["fit", "--config", str(config)])
    metrics = (next((tmp_path / "run" / "logs").glob("version_*")) / "metrics.csv").read_text()
    assert "train/nll" in metrics and "test/bleu4" in metrics

    with pytest.raises(SystemExit) as stale:  # another crop size: the cache no longer matches
        main(["fit", "--config", str(config), "--data.source.init_args.crop_size", "48"])
    assert "does not match this config (transform" in str(stale.value)
    assert "caption features --config" in str(stale.value)


DATASET_CONFIGS = ["coco_soft", "coco_hard", "flickr8k_soft", "flickr8k_hard", "flickr30k_soft", "flickr30k_hard"]


@pytest.mark.parametrize("name", DATASET_CONFIGS)
def test_dataset_configs_parse(name, capsys):
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", name, "--print_config"])
    assert not done.value.code
    config = yaml.safe_load(capsys.readouterr().out)
    dataset, kind = name.split("_")
    model = config["model"]
    assert model["attention"]["kind"] == kind and model["encoder"]["freeze"]
    assert config["data"]["features"] == f"data/features/{dataset}_vgg16", "soft and hard share one cache"
    assert config["data"]["source"]["init_args"]["annotations"] == f"data/{dataset}/dataset_{dataset}.json"
    assert config["data"]["same_length_batches"] and config["data"]["batch_size"] == 64
    assert model["optimization"]["optimizer"] == ("rmsprop" if dataset == "flickr8k" else "adam")
    if kind == "hard":  # the original's effective weights at B = 64 (tests/model/test_original_objective.py)
        assert (model["hard"]["entropy_weight"], model["hard"]["reinforce_weight"]) == (0.002, 6.4)
    else:
        assert model["soft"]["alpha_c"] == 0.33


@pytest.mark.slow
def test_the_coco_config_builds_a_cache_of_the_fixture(dataset, tmp_path):
    root, annotations, weights = dataset
    main(["features", "--config", "coco_hard",
          "--data.source.init_args.annotations", str(annotations),
          "--data.source.init_args.images", str(root / "images"),
          "--data.source.init_args.crop_size", "32", "--data.source.init_args.resize_size", "36",
          "--data.features", str(tmp_path / "features"), "--data.num_workers", "0",
          "--model.encoder.weights", str(weights), "--trainer.default_root_dir", str(tmp_path / "run")])
    manifest = json.loads((tmp_path / "features" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["shape"] == [9, 4, 512] and manifest["encoder"] == "vgg16"


@pytest.mark.slow
def test_ctrl_c_and_config_mistakes_in_caption_features_are_one_line(dataset, tmp_path, monkeypatch, capsys):
    root, annotations, weights = dataset
    config = write_config(tmp_path, root, annotations, weights)
    with pytest.raises(SystemExit) as mistake:
        main(["features", "--config", str(config), "--data.featurs", str(tmp_path / "elsewhere")])
    assert str(mistake.value.code).startswith("caption: error: unrecognized arguments: --data.featurs")
    assert "usage:" not in capsys.readouterr().err

    forward = TorchvisionVGG.forward
    calls = []

    def interrupted_at_the_second_batch(self, images):
        calls.append(len(images))
        if len(calls) == 2:
            raise KeyboardInterrupt  # what Python raises on Ctrl-C
        return forward(self, images)

    monkeypatch.setattr(TorchvisionVGG, "forward", interrupted_at_the_second_batch)
    with pytest.raises(SystemExit) as stopped:
        main(["features", "--config", str(config)])
    said = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("features:")]
    assert stopped.value.code == 130 and said == ["caption: stopped by Ctrl-C"], "one line besides the progress bar"
    monkeypatch.setattr(TorchvisionVGG, "forward", forward)
    main(["features", "--config", str(config)])  # resumes and finishes
    assert json.loads((tmp_path / "features" / "manifest.json").read_text())["complete"]
