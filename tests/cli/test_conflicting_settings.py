"""Settings that conflict with a checkpoint: refused in one line naming both values and where
the setting was given, or applied and said so (`model.optimization.init_from` across attention kinds); never dropped
silently."""

import logging
import sys

import pytest
from kit.cli import failed
from kit.tiny import HARD_FROM_SCRATCH, tiny_run_args

from caption.cli import main
from caption.config.packaged import packaged_configs

pytestmark = pytest.mark.slow  # the tiny runs (conftest.py)


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


def lightning(command: str, kind: str, tmp_path, *extra: str) -> list[str]:
    """`caption COMMAND` with the tiny runs' settings and the named run shapes_KIND, writing under tmp_path (hard:
    without its stage 1, which no test here needs)."""
    stage_one = HARD_FROM_SCRATCH if kind == "hard" else []
    return [command, *tiny_run_args(kind, tmp_path / "run", tmp_path / "data"), *stage_one, *extra]


def test_a_config_of_the_other_attention_kind_is_refused_naming_both(tiny_runs, tmp_path):
    hard = tiny_runs["hard"] / "checkpoints" / "last.ckpt"
    line = failed(lightning("test", "soft", tmp_path, "--ckpt_path", str(hard)))
    config = packaged_configs()["soft"]  # the fragment of shapes_soft that sets it
    assert f"model.attention.kind is 'soft' in config file {config} but {hard} was trained with 'hard'" in line


@pytest.mark.parametrize("command", ["test", "validate", "predict"])
@pytest.mark.parametrize("key, value, trained", [
    ("attention.kind", "soft", "'hard'"), ("encoder.name", "resnet50", "'small_vgg'"),
    ("decoder.hidden_dim", "32", "16"),
])
def test_an_explicit_model_setting_that_differs_from_the_checkpoint_is_refused(
        tiny_runs, tmp_path, command, key, value, trained):
    hard = tiny_runs["hard"] / "checkpoints" / "last.ckpt"
    if command == "predict":
        args = ["predict", "--ckpt_path", str(hard), "--data.predict", str(tmp_path)]
    else:
        args = lightning(command, "hard", tmp_path, "--ckpt_path", str(hard))
    line = failed([*args, f"--model.{key}", value])
    shown = value if key == "decoder.hidden_dim" else repr(value)
    assert f"model.{key} is {shown} on the command line but {hard} was trained with {trained}" in line


def test_resuming_with_other_model_settings_is_refused(tiny_runs, tmp_path):
    run = tiny_runs["soft"]
    args = ["fit", *tiny_run_args("hard", run, tmp_path / "data"), "--ckpt_path", "last"]
    line = failed(args)
    assert f"model.attention.kind is 'hard' in this run's settings but {run / 'checkpoints' / 'last.ckpt'}" in line
    assert "was trained with 'soft'" in line


@pytest.mark.parametrize("source, target", [("hard", "soft"), ("soft", "hard")])
def test_init_from_the_other_attention_kind_uses_the_weights_and_says_what_it_leaves(
        tiny_runs, tmp_path, caplog, source, target):
    checkpoint = tiny_runs[source] / "checkpoints" / "last.ckpt"
    with caplog.at_level(logging.INFO):
        main(lightning("fit", target, tmp_path, "--model.optimization.init_from", str(checkpoint),
                       "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0"))
    said = f"model.optimization.init_from: {checkpoint} was trained with {source} attention, this run uses {target}"
    assert said in caplog.text
    assert "objective.baseline.value (for hard attention only) is left out" in caplog.text if source == "hard" else \
        "objective.baseline.value starts afresh" in caplog.text
    assert f"Starting from the weights of {checkpoint}" in caplog.text
