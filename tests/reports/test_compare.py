"""`caption compare` draws the training curves of runs logged to CSV or to TensorBoard (the negative log-likelihood,
the objective's terms and every validation figure, the chance levels as reference lines, over integer steps from 0,
a marker at each point of a short curve), names a run it cannot draw and why, and calls two runs trained on other
data only when what defines the data differs, not its folder."""

import csv
import json
import math
import shutil
import sys
import warnings

import pytest
import torch

from kit.tiny import fit_args

from caption.cli import main
from caption.io.provenance import Provenance
from caption.reports.figures import CHANCE_LEVELS, constant_curves, MARKED, curves_figure, logged_curves
from caption.reports.logs import drawn as is_curve
from caption.reports.runs import data_differences, model_names, read_models
from caption.errors import ConfigError

pytest.importorskip("tensorboard")
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

pytestmark = pytest.mark.slow  # the tiny runs (conftest.py)


def copied_run(run, to, **source_settings):
    """A copy of `run` whose checkpoints record other data settings (`source_settings`, e.g. root=...)."""
    shutil.copytree(run, to)
    for path in (to / "checkpoints").glob("*.ckpt"):
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
        checkpoint["datamodule_hyper_parameters"]["source"]["init_args"].update(source_settings)
        torch.save(checkpoint, path)
    return to


def logged_to_tensorboard_only(run):
    """`run` with its CSV logs replaced by TensorBoard event files of the same scalars."""
    for metrics in run.rglob("metrics.csv"):
        metrics.unlink()
    with SummaryWriter(str(run / "tb" / "version_0")) as writer:
        for step, (nll, bleu4) in enumerate([(3.0, 0.1), (2.0, 0.3), (1.5, 0.5)]):
            writer.add_scalar("train/nll", nll, step * 10)
            writer.add_scalar("val/bleu4", bleu4, step * 10)


def test_curves_come_from_tensorboard_logs_too_and_a_run_without_logs_is_named(tiny_runs, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])
    moved = copied_run(tiny_runs["soft"], tmp_path / "moved", root=str(tmp_path / "elsewhere" / "shapes"))
    logged_to_tensorboard_only(moved)
    out = tmp_path / "report"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        main(["compare", str(tiny_runs["soft"]), str(moved), "--names", "csv", "tensorboard", "--predictions.out",
              str(out), "--images", "0", "--split", "val"])
    assert not [str(w.message) for w in warned if "other data" in str(w.message)], \
        "a moved data folder is the same data"
    assert not [str(w.message) for w in warned if "no training curves" in str(w.message)]
    assert (out / "curves.png").is_file()
    made = json.loads((out / "csv" / "metrics.json").read_text())["provenance"]
    assert made["seed"] == 0 and made["precision"] in ("32-true", "bf16-mixed"), "the run's saved seed_everything: 0"
    line = Provenance(**made).line()
    assert line.startswith(f"precision {made['precision']}, seed 0, commit ") and "device cpu (" in line
    report = (out / "report.md").read_text()
    assert f"metrics and captions in `csv/`; made with {line}" in report
    assert f"metrics and captions in `tensorboard/`; made with {line}" in report, "a copy of the run: its config too"
    left_out = constant_curves(logged_curves(read_models([tiny_runs["soft"], moved], names=["csv", "tensorboard"],
                                                         device="cpu", config=None))[0])
    assert left_out, "the tiny runs end no caption in a function word: val/dangling_ending stays 0"
    assert "Left out, one constant value for every run at every step: " + ", ".join(
        f"`{name}` = {value:g}" for name, value in left_out.items()) in report

    no_logs = tmp_path / "no_logs"
    shutil.copytree(tiny_runs["hard"] / "checkpoints", no_logs / "checkpoints")
    models = read_models([tiny_runs["soft"], moved, no_logs], names=["csv", "tensorboard", "none"], device="cpu",
                         config=None)
    curves, left_out = logged_curves(models)
    assert curves["tensorboard"]["val/bleu4"] == [(0, pytest.approx(0.1)), (10, pytest.approx(0.3)),
                                                  (20, pytest.approx(0.5))]
    assert list(left_out) == ["none"] and "no logs (metrics.csv or TensorBoard event files)" in left_out["none"]

    rows = list(csv.DictReader((tiny_runs["soft"] / "logs" / "version_0" / "metrics.csv").open()))
    logged = {name: [(int(row["step"]), float(row[name])) for row in rows
                     if row.get(name) not in (None, "") and math.isfinite(float(row[name]))]
              for name in rows[0] if is_curve(name)}
    assert "train/loss" not in curves["csv"], "soft's and hard's objectives share no axis"
    assert list(curves["csv"])[:3] == ["train/nll", "val/bleu4", "val/cider"], "the likelihood, then the metrics"
    assert curves["csv"] == {name: points for name, points in logged.items() if points}, "every point of metrics.csv"
    assert len(curves["csv"]["train/nll"]) >= 4 and len(curves["csv"]["val/bleu4"]) == 2, "4 epochs, validated twice"

    panels = {ax.get_title(): ax for ax in curves_figure(curves).axes if ax.get_visible()}
    constant = constant_curves(curves)
    assert list(panels) == [name for name in curves["csv"] if name not in CHANCE_LEVELS and name not in constant], \
        "a panel per curve but those of one value throughout"
    for name, ax in panels.items():
        drawn = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata())) for line in ax.get_lines()
                 if line.get_gid() not in CHANCE_LEVELS}
        expected = {model: points for model, logged_by in curves.items() if (points := logged_by.get(name))}
        assert drawn == expected, name
        assert all(line.get_marker() == "o" for line in ax.get_lines() if line.get_gid() not in CHANCE_LEVELS), \
            "a few points each: a marker at each"
        assert ax.get_xlim()[0] <= 0 and all(tick == int(tick) for tick in ax.get_xticks()), "whole steps from 0"


def test_a_tensorboard_run_logs_in_its_run_folder_and_compare_draws_its_curves(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a named run's own folder would be elsewhere/runs/shapes_soft
    run = tmp_path / "run"
    main(["fit", *fit_args(run, "--trainer.logger", "caption.training.loggers.TensorBoardLogger", logs=False),
          "--trainer.limit_test_batches", "0"])
    assert list(run.glob("logs/version_0/events.out.tfevents.*")), "the logs are in the run folder"
    assert not (elsewhere / "runs").exists(), "nothing in the named run's default folder"
    out = tmp_path / "report"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        main(["compare", str(run), "--predictions.out", str(out), "--images", "0", "--split", "val"])
    assert not [str(w.message) for w in warned if "no training curves" in str(w.message)]
    assert (out / "curves.png").is_file() and "![training curves](curves.png)" in (out / "report.md").read_text()


def test_a_curve_of_many_points_is_a_line_without_markers():
    """Fifty epochs' validations: lines; a run with one validation: its dot, on the same axis of whole steps."""
    long = {"train/nll": [(step, 1 / (1 + step)) for step in range(0, 5000, 10)],
            "val/bleu4": [(100 * epoch, epoch / 50) for epoch in range(1, 51)]}
    short = {"train/nll": [(3, 2.0)], "val/bleu4": [(3, 0.1)]}
    figure = curves_figure({"fifty epochs": long, "one epoch": short})
    for ax in figure.axes[:2]:
        markers = {line.get_label(): line.get_marker() for line in ax.get_lines()}
        assert markers == {"fifty epochs": "None", "one epoch": "o"}, (ax.get_title(), markers)
        assert len(long[ax.get_title()]) >= MARKED
        assert ax.get_xlim() == (pytest.approx(-150), pytest.approx(5150)), "from 0 to the last step of either run"


def test_a_run_on_other_data_is_named_with_what_differs(tiny_runs, tmp_path):
    moved = copied_run(tiny_runs["soft"], tmp_path / "moved", root=str(tmp_path / "elsewhere"))
    fewer = copied_run(tiny_runs["soft"], tmp_path / "fewer", num_train=20)
    soft, same, other = (model.training_data() for model in read_models(
        [tiny_runs["soft"], moved, fewer], names=None, device="cpu", config=None))
    assert data_differences(soft, same) == []
    assert data_differences(soft, other) == ["data.source.init_args.num_train: 20 vs 50"]


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", ".", "", "a\\b"])
def test_names_that_are_not_folder_names_are_refused(name):
    """Each model's results go to a folder of its name inside --predictions.out: a name cannot lead out of it."""
    with pytest.raises(ConfigError, match="not a folder name"):
        model_names([object(), object()], [name, "hard"])
    assert model_names([object(), object()], ["soft run", "hard"]) == ["soft run", "hard"]
