"""`caption fit --config shapes_<kind>_scst` end to end on tiny data: from the cross-entropy run's checkpoint, one epoch
of self-critical training logs the reward and what explains it, validates on CIDEr-D, and moves the weights."""

import csv
import json
import sys
from unittest.mock import patch

import pytest
import torch
from kit.cli import failed
from kit.tiny import run_args, tiny_args

from caption.cli import main
from caption.io.checkpoints import find_checkpoint, read_checkpoint

EXPLAINED = ("train/cider", "train/cider_baseline", "train/advantage_std", "train/advantage_positive",
             "train/sample_length")


def scst_args(tiny_runs, kind: str, out) -> list[str]:
    """The named run on the tiny runs' data and dims (their vocabulary), one epoch, from run `kind`."""
    data = tiny_runs[kind].parent / "data"
    return ["fit", "--config", f"shapes_{kind}_scst",
            *tiny_args(data, channels="[4, 8, 8]", batch_size=32, num_train=50),
            *run_args(out), "--trainer.max_epochs", "1", "--trainer.limit_test_batches", "0",
            "--trainer.log_every_n_steps", "1", "--trainer.enable_model_summary", "false",
            "--model.optimization.init_from", str(tiny_runs[kind])]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "baseline"), [("soft", "mean_of_others"), ("hard", "greedy")])
def test_self_critical_fit_from_a_cross_entropy_run(tiny_runs, tmp_path, kind, baseline):
    out = tmp_path / "scst"
    with patch.object(sys, "argv", ["caption"]):
        main([*scst_args(tiny_runs, kind, out), "--model.self_critical.baseline", baseline,
              "--model.optimization.learning_rate", "0.001"])
    rows = list(csv.DictReader((out / "logs" / "version_0" / "metrics.csv").open()))
    trained = [row for row in rows if row.get("train/cider")]
    assert trained and all(row[name] != "" for row in trained for name in EXPLAINED)
    assert not any(row.get("train/reward") or row.get("train/baseline") for row in rows), "hard's names, not SCST's"
    assert all(0.0 <= float(row["train/advantage_positive"]) <= 1.0 for row in trained)
    assert ("train/entropy" in rows[0]) == (kind == "hard")  # H[s̃] reported for hard attention
    assert any(row.get("val/cider") for row in rows) and any(row.get("val/attention_accuracy") for row in rows)
    start = read_checkpoint(find_checkpoint(tiny_runs[kind]))
    after = read_checkpoint(out / "checkpoints" / "last.ckpt")
    assert after["hyper_parameters"]["self_critical"] == {"samples": 5, "baseline": baseline, "max_length": 20}
    decoder = [key for key in start["state_dict"] if key.startswith("decoder.")]
    assert any(not torch.equal(start["state_dict"][key], after["state_dict"][key]) for key in decoder), "it trained"
    encoder = [key for key in start["state_dict"] if key.startswith("encoder.")]
    assert all(torch.equal(start["state_dict"][key], after["state_dict"][key]) for key in encoder), "frozen"
    if kind == "soft":  # the cross-entropy run and its self-critical run side by side
        main(["compare", str(tiny_runs[kind]), str(out), "--predictions.out", str(tmp_path / "report"),
              "--images", "1"])
        report = (tmp_path / "report" / "report.md").read_text()
        assert "| soft (ours) |" in report and "| soft-scst (ours) |" in report
        metrics = json.loads((tmp_path / "report" / "soft-scst" / "metrics.json").read_text())
        assert metrics["distinct_captions"] >= 1 and "distinct_captions" in metrics["metrics"]


def test_self_critical_training_without_a_model_to_start_from_is_refused(tiny_runs, tmp_path):
    args = scst_args(tiny_runs, "soft", tmp_path / "scst")
    line = failed([*args[:-2], "--model.optimization.init_from", "null"])
    assert "model.self_critical fine-tunes a captioner trained with cross-entropy" in line
    assert "model.optimization.init_from" in line


@pytest.mark.slow
def test_a_run_started_from_a_checkpoint_reads_no_stage_zero_encoder_file(tiny_runs, tmp_path, monkeypatch):
    """From a folder without runs/shapes_encoder (the file the shapes configs' model.encoder.weights names), a
    self-critical run from a checkpoint trains: the checkpoint supplies every weight, the encoder's included."""
    args = scst_args(tiny_runs, "soft", tmp_path / "scst")
    at = next(index for index in range(len(args) - 1) if args[index:index + 2] == ["--model.encoder.weights", "none"])
    args = [*args[:at], *args[at + 2:], "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "runs").exists()
    with patch.object(sys, "argv", ["caption"]):
        main(args)
    start = read_checkpoint(find_checkpoint(tiny_runs["soft"]))
    after = read_checkpoint(tmp_path / "scst" / "checkpoints" / "last.ckpt")
    assert after["hyper_parameters"]["encoder"]["weights"] == "runs/shapes_encoder"  # the config, as given
    encoder = [key for key in start["state_dict"] if key.startswith("encoder.")]
    assert encoder and all(torch.equal(start["state_dict"][key], after["state_dict"][key]) for key in encoder)
