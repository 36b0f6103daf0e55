"""`caption pretrain-encoder` end to end on tiny data: a classifier of the built-in shapes beats chance, its encoder
loads as `model.encoder.weights` and gives the same annotation grid, class folders work too, data without labels
is refused in one line, and a pre-empted run keeps its best epoch so far."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from kit.cli import REPO, environment, failed
from kit.data import karpathy_dataset, write_image

from caption.cli import INTERRUPTED, TERMINATED, main
from caption.io import encoder_weights
from caption.model.encoder import EncoderSettings, build_encoder

TINY_ENCODER = {"channels": [8, 16], "kernel_sizes": [3, 3], "coordinates": True}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny small_vgg pretrained on 120 shapes images (5 epochs of 8 steps), and what the command printed."""
    root = tmp_path_factory.mktemp("pretrain")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"encoder": TINY_ENCODER},
        "data": {"source": {"init_args": {"root": str(root / "data"), "num_train": 120, "num_val": 40, "num_test": 1}}},
    }))
    out = root / "encoder"
    with pytest.MonkeyPatch.context() as patch:
        printed = []
        patch.setattr("builtins.print", lambda *args, **kwargs: printed.append(" ".join(map(str, args))))
        main(["pretrain-encoder", "--config", "shapes_encoder", "--config", str(config),
              "--trainer.default_root_dir", str(out), "--pretraining.epochs", "5", "--pretraining.batch_size", "16",
              "--pretraining.learning_rate", "0.003", "--trainer.accelerator", "cpu"])
    return out, "\n".join(printed)


def test_a_classifier_of_tiny_shapes_beats_chance_and_says_its_confusion(pretrained):
    out, printed = pretrained
    about = json.loads((out / "encoder.json").read_text())
    assert about["categories"] == ["circle", "square", "triangle"]
    assert [entry["epoch"] for entry in about["history"]] == [0, 1, 2, 3, 4]
    assert about["accuracy"] == max(entry["accuracy"] for entry in about["history"])
    assert about["accuracy"] > 1 / 3 + 0.2, about["history"]  # three categories: chance is 1/3
    confusion = about["history"][about["best_epoch"]]["confusion"]
    assert sum(map(sum, confusion)) > 40  # every object of the 40 validation images, one to three each
    assert "best validation accuracy" in printed and "triangle" in printed.splitlines()[-2]
    assert about["encoder"]["weights"] == "none" and about["encoder"]["freeze"] is False


def test_the_pretrained_encoder_loads_as_model_encoder_weights_with_the_same_grid(pretrained):
    out, _ = pretrained
    state = torch.load(out / "encoder.pt", weights_only=True)
    assert not any(key.startswith("head.") for key in state)  # the classifier is dropped
    settings = {"name": "small_vgg", "channels": (8, 16), "kernel_sizes": (3, 3), "coordinates": True}
    for weights in (str(out), str(out / "encoder.pt")):  # the folder, or the file
        loaded = build_encoder(EncoderSettings(**settings, weights=weights, freeze=True), reader=encoder_weights)
        fresh = build_encoder(EncoderSettings(**settings, weights="none", freeze=True))
        fresh.load_state_dict(state)
        images = torch.randn(2, 3, 64, 64)
        annotations = loaded(images)
        assert annotations.shape == (2, 32 * 32, 16)  # the 32x32 grid of two blocks, as captioning sees it
        assert torch.equal(annotations, fresh.eval()(images))
        assert not any(parameter.requires_grad for parameter in loaded.parameters())


def test_a_folder_of_class_folders_is_classified_whole(tmp_path):
    for label, seeds in (("bright", range(12)), ("dark", range(12, 24))):
        for seed in seeds:
            write_image(tmp_path / "classes" / label / f"{seed}.png", size=(64, 64), seed=seed)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({"model": {"encoder": TINY_ENCODER}, "data": {"source": {"init_args": {
        "root": str(tmp_path / "data"), "num_train": 2, "num_val": 1, "num_test": 1}}}}))
    main(["pretrain-encoder", "--config", "shapes_encoder", "--config", str(config), "--images",
          str(tmp_path / "classes"), "--trainer.default_root_dir", str(tmp_path / "out"), "--pretraining.epochs", "1",
          "--trainer.accelerator", "cpu"])
    about = json.loads((tmp_path / "out" / "encoder.json").read_text())
    assert about["categories"] == ["bright", "dark"]
    assert about["images"] == {"train": 22, "val": 2}  # the 10th image of each class held out
    assert sum(map(sum, about["history"][0]["confusion"])) == 2


def test_data_without_labels_is_refused_in_one_line(tmp_path):
    karpathy = karpathy_dataset(tmp_path, coco=False)
    config = tmp_path / "captions_only.yaml"
    config.write_text(yaml.safe_dump({"data": {"source": {
        "class_path": "caption.data.sources.karpathy.KarpathySource",
        "init_args": {"annotations": str(karpathy), "images": str(tmp_path / "images"), "resize_size": 64,
                      "crop_size": 64}}}}))
    line = failed(["pretrain-encoder", "--config", "shapes_encoder", "--config", str(config),
                   "--trainer.default_root_dir", str(tmp_path / "out"), "--trainer.accelerator", "cpu"])
    assert "no labelled objects" in line and "instances file" in line
    assert not (tmp_path / "out" / "encoder.pt").exists()


def test_fit_refuses_an_encoder_run_and_names_its_command():
    line = failed(["fit", "--config", "shapes_encoder"])
    assert "caption pretrain-encoder --config shapes_encoder" in line


def test_composed_with_other_data_it_needs_its_own_folder(tmp_path):
    line = failed(["pretrain-encoder", "--config", "shapes_encoder", "--config", str(tmp_path / "mine.yaml")])
    assert "--trainer.default_root_dir runs/<data>_encoder" in line


def test_a_torchvision_vgg_from_random_weights_writes_torchvision_keys(tmp_path):
    config = tmp_path / "vgg.yaml"
    config.write_text(yaml.safe_dump({"model": {"encoder": {"name": "vgg16"}}, "data": {"source": {"init_args": {
        "root": str(tmp_path / "data"), "num_train": 4, "num_val": 2, "num_test": 1}}}}))
    main(["pretrain-encoder", "--config", "shapes_encoder", "--config", str(config),
          "--trainer.default_root_dir", str(tmp_path / "vgg"), "--pretraining.epochs", "1",
          "--pretraining.batch_size", "4", "--trainer.accelerator", "cpu"])
    state = torch.load(tmp_path / "vgg" / "encoder.pt", weights_only=True)
    assert "features.28.weight" in state and not any(key.startswith("head.") for key in state)  # conv5_3, no head
    loaded = build_encoder(EncoderSettings(name="vgg16", weights=str(tmp_path / "vgg")), reader=encoder_weights)
    assert torch.equal(loaded.features[28].weight, state["features.28.weight"])
    assert loaded(torch.randn(1, 3, 64, 64)).shape == (1, 16, 512)  # 64 / 16 = a 4x4 grid of conv5 vectors


@pytest.mark.slow
@pytest.mark.parametrize(("sent", "status", "reason"), [(signal.SIGTERM, TERMINATED, "pre-empted (SIGTERM)"),
                                                         (signal.SIGINT, INTERRUPTED, "stopped by Ctrl-C")])
def test_a_stop_keeps_the_best_encoder_so_far_and_says_how_to_go_on(tmp_path, sent, status, reason):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({"model": {"encoder": TINY_ENCODER}, "data": {"source": {"init_args": {
        "root": str(tmp_path / "data"), "num_train": 16, "num_val": 4, "num_test": 1}}}}))
    out, log = tmp_path / "out", tmp_path / "output.txt"
    with log.open("w") as written:  # a file, not a pipe: nothing blocks however much the bars write
        process = subprocess.Popen(
            [sys.executable, "-m", "caption.cli", "pretrain-encoder", "--config", "shapes_encoder", "--config",
             str(config), "--trainer.default_root_dir", str(out), "--pretraining.epochs", "1000",
             "--pretraining.batch_size", "8", "--trainer.accelerator", "cpu"],
            cwd=REPO, env=environment(), stdout=written, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while "val/accuracy" not in log.read_text():  # the first epoch's bar, finished once it was validated
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no epoch finished in time"
            time.sleep(0.05)
        process.send_signal(sent)
        process.wait(timeout=120)
    finally:
        process.kill()
    output = log.read_text()
    assert process.returncode == status, output[-3000:]
    about = json.loads((out / "encoder.json").read_text())
    stopped = about["stopped"]
    assert stopped["reason"] == reason and stopped["epochs"] == 1000
    assert 2 <= stopped["epoch"] < 1000 and len(about["history"]) >= stopped["epoch"] - 1
    assert about["accuracy"] == max(entry["accuracy"] for entry in about["history"])
    assert f"--model.encoder.weights {out}" in stopped["go_on"]
    lines = [line for line in output.splitlines() if line.startswith(f"caption pretrain-encoder: {reason}")]
    assert len(lines) == 1 and "Traceback" not in output, output[-3000:]
    assert f"at epoch {stopped['epoch']} of 1000: wrote {out / 'encoder.pt'}" in lines[0]
    assert stopped["go_on"] in lines[0]
    state = torch.load(out / "encoder.pt", weights_only=True)
    assert state and not any(key.startswith("head.") for key in state)
