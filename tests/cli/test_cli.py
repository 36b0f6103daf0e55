"""`caption fit` and `caption test` end to end through the real command line, on tiny settings."""

import csv
import math

import pytest
import torch
from kit.cli import caption
from kit.tiny import HARD_FROM_SCRATCH, config, encoder_from, fit_args, tiny_model_args

from caption.training.module import CaptionModule


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_fit_then_test_through_the_cli(tmp_path, kind):
    stage_one = HARD_FROM_SCRATCH if kind == "hard" else []  # the two-stage recipe: tests/conftest.py's tiny_runs
    run = tmp_path / "run"
    fit = caption("fit", *fit_args(run, *stage_one, kind=kind))
    assert fit.returncode == 0, fit.stderr[-3000:]
    output = fit.stdout + fit.stderr
    assert ("test (best checkpoint): bleu1 " in output
            and " meteor " in output), "fit ends by testing the best checkpoint"
    assert "Example test captions" in output

    checkpoints = sorted((run / "checkpoints").glob("*.ckpt"))  # <default_root_dir>/checkpoints
    names = {path.name for path in checkpoints}
    assert "last.ckpt" in names and any(name.startswith("best-") for name in names)
    last = next(path for path in checkpoints if path.name == "last.ckpt")

    module = CaptionModule.load_from_checkpoint(last, weights_only=True, map_location="cpu")
    assert module.model.settings.attention.kind == kind
    vocabulary = module.model.vocabulary
    assert vocabulary.itos[:4] == ["<pad>", "<start>", "<end>", "<unk>"] and len(vocabulary) > 10
    if module.model.settings.attention.kind == "hard":
        state = torch.load(last, weights_only=True, map_location="cpu")["state_dict"]
        assert state["objective.baseline.value"] != 0, "the baseline moved during training and is saved"

    test = caption("test", *fit_args(run, "--ckpt_path", str(last), kind=kind))
    assert test.returncode == 0, test.stderr[-3000:]
    assert "test/cider" in test.stdout + test.stderr


def test_bad_config_value_names_the_key(tmp_path):
    result = caption("fit", *config("shapes_soft"), "--model.attention.kind", "medium")
    assert result.returncode != 0
    assert "model.attention.kind" in result.stderr and "medium" in result.stderr
    assert "Traceback" not in result.stderr


def test_conflicting_settings_are_rejected_early(tmp_path):
    result = caption("fit", *fit_args(tmp_path / "run", "--model.hard.samples", "4"))
    assert result.returncode != 0
    assert "model.hard only applies to model.attention.kind: hard" in result.stderr


def test_validation_logs_attention_accuracy_and_follows_the_lr_schedule(tiny_runs):
    """The shapes configs' ExponentialLR (γ = 0.7, one step per epoch) comes through LightningCLI's `lr_scheduler:`, and
    every validation logs attention accuracy beside the score of a random location, and α's entropy."""
    rows = list(csv.DictReader((tiny_runs["soft"] / "logs" / "version_0" / "metrics.csv").open()))
    validations = [row for row in rows if row.get("val/bleu4")]
    assert validations
    for row in validations:  # every share NaN while the tiny model names no object yet; numbers once it does
        shares = [float(row[f"val/attention_{name}"]) for name in ("accuracy", "other_object", "background", "absent")]
        chance = float(row["val/attention_chance_location"])
        if math.isnan(shares[0]):
            assert all(math.isnan(share) for share in shares) and math.isnan(chance)
        else:
            assert all(0.0 <= share <= 1.0 for share in shares) and sum(shares) == pytest.approx(1.0)
            assert 0.0 < chance < 0.5
        assert float(row["val/alpha_entropy"]) > 0
    rates = list(dict.fromkeys(float(row["lr-Adam"]) for row in rows if row.get("lr-Adam")))  # in step order
    assert len(rates) >= 3
    assert rates == pytest.approx([0.01 * 0.7**epoch for epoch in range(len(rates))])


@pytest.mark.slow
def test_hard_recipe_trains_its_decoder_on_the_soft_runs_frozen_encoder(tiny_runs, tmp_path):
    """Stage 2 (the named run shapes_hard) starts from stage 1's best encoder and leaves it exactly as it was,
    BatchNorm statistics included, while its own decoder trains from scratch."""
    soft_best = min((tiny_runs["soft"] / "checkpoints").glob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    soft = torch.load(soft_best, weights_only=True)["state_dict"]
    hard = torch.load(tiny_runs["hard"] / "checkpoints" / "last.ckpt", weights_only=True)
    encoder = {key: value for key, value in hard["state_dict"].items() if key.startswith("encoder.")}
    assert encoder and all(torch.equal(value, soft[key]) for key, value in encoder.items())
    assert hard["hyper_parameters"]["encoder"]["freeze"] and hard["global_step"] > 0
    assert not torch.equal(hard["state_dict"]["decoder.init_h.weight"], soft["decoder.init_h.weight"])

    misfit = caption("fit", *fit_args(tmp_path / "run", *tiny_model_args(channels="[4, 8]"),
                                      *encoder_from(tiny_runs["soft"]), kind="hard"))
    assert misfit.returncode != 0
    assert "does not fit this small_vgg: use its run's model.encoder.channels" in misfit.stderr
    assert "Traceback" not in misfit.stderr
