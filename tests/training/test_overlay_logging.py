"""A logger that shows attention: `AttentionImages` puts the overlays and captions of fixed validation images in
TensorBoard (images and text per validation), beside the CSV logger's metrics, in W&B (`log_image`) and in MLflow
(`log_figure`, `log_text`), and says in one line that a logger without images gets none; hyperparameters are logged
without the vocabulary."""

import csv
import io
import json
import sys

import numpy as np
import pytest
import yaml
from kit.tiny import tiny_args
from PIL import Image

import caption.training.overlay_logging
from caption.cli import main
from caption.data.datamodule import DATA_LINKS

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


@pytest.mark.slow
def test_every_logger_that_takes_images_gets_overlays_and_captions_at_every_validation(tmp_path, monkeypatch):
    run = tmp_path / "run"
    loggers = tmp_path / "loggers.yaml"
    loggers.write_text(yaml.safe_dump({"trainer": {"logger": [
        {"class_path": "caption.training.loggers.TensorBoardLogger",
         "init_args": {"save_dir": str(run), "name": "tb"}},
        {"class_path": "caption.training.loggers.CSVLogger", "init_args": {"save_dir": str(run), "name": "csv"}},
        *({"class_path": f"kit.loggers.{name}", "init_args": {"save_dir": str(run), "name": name}}
          for name in ("WandbStandIn", "MLFlowStandIn", "NoImages")),
    ]}}))
    monkeypatch.setattr(sys, "argv", ["caption"])
    said = []
    monkeypatch.setattr(caption.training.overlay_logging, "rank_zero_info", said.append)
    main(["fit", "--config", "shapes_soft", "--config", str(loggers), "--import", "kit.loggers",
          "--trainer.callbacks+=caption.training.overlay_logging.AttentionImages",
          "--trainer.callbacks.num_images", "2",
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
    linked = set(DATA_LINKS.values())  # each setting once: the model's encoder settings, not the data's copies
    assert hparams["encoder.name"] == "small_vgg" and not linked & set(hparams), sorted(linked & set(hparams))

    folder = run / "csv" / "version_0" / "attention"
    rows = list(csv.DictReader((folder / "captions.csv").open()))
    assert len(rows) == 4 and {row["image_id"] for row in rows} == {tag.split("/")[1] for tag in images}
    for row in rows:
        assert (folder / f"step{row['step']}-image{row['image_id']}.png").is_file()
    assert (run / "csv" / "version_0" / "metrics.csv").is_file(), "beside its metrics"
    assert "vocabulary:" not in (run / "csv" / "version_0" / "hparams.yaml").read_text()

    wandb = [json.loads(line) for line in (run / "WandbStandIn" / "logged.jsonl").read_text().splitlines()]
    assert [(call["call"], call["key"]) for call in wandb] == [("log_image", "attention")] * 2, "one per validation"
    assert [call["step"] for call in wandb] == sorted({event.step for event in logged})
    for call in wandb:
        assert len(call["files"]) == 2 and len(call["caption"]) == 2
        assert [text.split(":")[0] for text in call["caption"]] == [f"image {tag.split('/')[1]}" for tag in images]
        assert all(np.asarray(Image.open(file)).std() > 0 for file in call["files"]), "a drawn figure"

    mlflow = [json.loads(line) for line in (run / "MLFlowStandIn" / "logged.jsonl").read_text().splitlines()]
    assert {call["run_id"] for call in mlflow} == {"run-1"}
    figures = [call["artifact_file"] for call in mlflow if call["call"] == "log_figure"]
    texts = [call["artifact_file"] for call in mlflow if call["call"] == "log_text"]
    assert len(figures) == 4 and len(texts) == 2
    artifacts = run / "MLFlowStandIn" / "artifacts"
    assert all((artifacts / name).is_file() for name in figures)
    rows = [row for name in texts for row in csv.DictReader((artifacts / name).open())]
    assert {row["image_id"] for row in rows} == {tag.split("/")[1] for tag in images} and len(rows) == 4

    assert said == ["AttentionImages: NoImages takes no images (TensorBoardLogger, CSVLogger, WandbLogger and "
                    "MLFlowLogger do); its overlays are left out"], "said once, not at every validation"
