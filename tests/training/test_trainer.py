"""`--trainer.precision`: "auto" accepted as documented (unset is the same), the precisions the model cannot run
refused in one line, before any work."""

import sys

import pytest
from kit.cli import failed, printed
from kit.tiny import fit_args

from caption.errors import ConfigError
from caption.io.device import default_precision
from caption.training.trainer import REFUSED, CaptionTrainer

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


@pytest.mark.parametrize("setting", [None, "auto"])
def test_auto_and_unset_are_the_devices_default(setting):
    trainer = CaptionTrainer(precision=setting, accelerator="cpu", **QUIET)
    assert trainer.precision == default_precision("cpu")


@pytest.mark.parametrize("setting", [None, "auto", "bf16-mixed"])
def test_with_an_accelerator_object_auto_is_32_true_and_a_precision_given_stays(setting):
    from lightning.pytorch.accelerators import CPUAccelerator

    trainer = CaptionTrainer(precision=setting, accelerator=CPUAccelerator(), **QUIET)
    assert trainer.precision == ("bf16-mixed" if setting == "bf16-mixed" else "32-true")


@pytest.mark.parametrize("setting", ["32-true", "32", 32, "bf16-mixed"])
def test_a_precision_the_model_runs_is_lightnings(setting):
    expected = {"32": "32-true", 32: "32-true"}.get(setting, setting)
    assert CaptionTrainer(precision=setting, accelerator="cpu", **QUIET).precision == expected


@pytest.mark.parametrize("setting", REFUSED)
def test_half_weights_are_refused_in_one_line(setting):
    with pytest.raises(ConfigError, match=f"^trainer.precision {setting}: the model keeps its weights") as error:
        CaptionTrainer(precision=setting, accelerator="cpu", **QUIET)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("setting", ["foo", "", "bf32"])
def test_an_unknown_precision_is_named_in_one_line(setting):
    with pytest.raises(ConfigError, match=f"^trainer.precision '{setting}' is none of auto, 32-true, bf16-mixed"):
        CaptionTrainer(precision=setting, accelerator="cpu", **QUIET)


def test_the_command_line_takes_auto_and_refuses_bf16_true_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])
    assert printed("--config", "shapes_soft", "--trainer.precision", "auto")["trainer"]["precision"] == "auto"
    line = failed(["fit", *fit_args(tmp_path / "run", "--trainer.precision", "bf16-true")])
    assert line.startswith("caption: error: trainer.precision bf16-true: the model keeps its weights"), line
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
