"""A logger that shows attention: `AttentionImages` puts the overlays and captions of fixed validation images in
TensorBoard (images and text per validation) and beside the CSV logger's metrics; hyperparameters are logged
without the vocabulary."""

import csv
import io
import sys

import numpy as np
import pytest
import yaml
from kit.tiny import tiny_args
from PIL import Image

from caption.cli import main

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


@pytest.mark.slow
def test_tensorboard_and_csv_get_overlays_and_captions_at_every_validation(tmp_path, monkeypatch):
    run = tmp_path / "run"
    loggers = tmp_path / "loggers.yaml"
    loggers.write_text(yaml.safe_dump({"trainer": {"logger": [
        {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
         "init_args": {"save_dir": str(run), "name": "tb"}},
        {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(run), "name": "csv"}},
    ]}}))
    monkeypatch.setattr(sys, "argv", ["caption"])
    main(["fit", "--config", "shapes_soft", "--config", str(loggers),
          "--trainer.callbacks+=caption.attention_images.AttentionImages", "--trainer.callbacks.num_images", "2",
          "--trainer.max_epochs", "2", "--trainer.limit_test_batches", "0", "--trainer.enable_progress_bar", "false",
          "--trainer.default_root_dir", str(run), *tiny_args(tmp_path / "data", num_train=16, num_val=4, num_test=4)])

    events = run / "tb" / "version_0"  # its event files (fit's, then test's)
    accumulator = EventAccumulator(str(events), size_guidance={"images": 0, "tensors": 0}).Reload()
    images = sorted(tag for tag in accumulator.Tags()["images"] if tag.startswith("attention/"))
    texts = sorted(tag for tag in accumulator.Tags()["tensors"] if tag.startswith("caption/"))
    assert len(images) == 2 and len(texts) == 2, accumulator.Tags()
    for tag in images:
        logged = accumulator.Images(tag)
        assert len(logged) == 2, "one per validation (2 epochs)"
        assert len({event.step for event in logged}) == 2
        pixels = np.asarray(Image.open(io.BytesIO(logged[-1].encoded_image_string)))
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0, "a drawn figure"
    hparams = yaml.safe_load((run / "tb" / "version_0" / "hparams.yaml").read_text())
    assert "vocabulary" not in hparams and hparams["vocabulary_size"] > 10 and hparams["attention.kind"] == "soft"

    folder = run / "csv" / "version_0" / "attention"
    rows = list(csv.DictReader((folder / "captions.csv").open()))
    assert len(rows) == 4 and {row["image_id"] for row in rows} == {tag.split("/")[1] for tag in images}
    for row in rows:
        assert (folder / f"step{row['step']}-image{row['image_id']}.png").is_file()
    assert (run / "csv" / "version_0" / "metrics.csv").is_file(), "beside its metrics"
    assert "vocabulary:" not in (run / "csv" / "version_0" / "hparams.yaml").read_text()
