"""`caption compare` draws the training curves of runs logged to CSV or to TensorBoard, names a run it cannot draw
and why, and calls two runs trained on other data only when what defines the data differs, not its folder."""

import shutil
import sys
import warnings

import pytest
import torch

from caption.cli import main
from caption.comparison.figures import logged_curves
from caption.comparison.models import data_differences, model_names, read_models
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
        main(["compare", str(tiny_runs["soft"]), str(moved), "--names", "csv", "tensorboard", "--predictions.out", str(out),
              "--images", "0", "--split", "val"])
    assert not [str(w.message) for w in warned if "other data" in str(w.message)], "a moved data folder is the same data"
    assert not [str(w.message) for w in warned if "no training curves" in str(w.message)]
    assert (out / "curves.png").is_file()

    no_logs = tmp_path / "no_logs"
    shutil.copytree(tiny_runs["hard"] / "checkpoints", no_logs / "checkpoints")
    models = read_models([tiny_runs["soft"], moved, no_logs], names=["csv", "tensorboard", "none"], device="cpu",
                         config=None)
    curves, left_out = logged_curves(models)
    assert curves["tensorboard"]["val/bleu4"] == [(0, pytest.approx(0.1)), (10, pytest.approx(0.3)),
                                                  (20, pytest.approx(0.5))]
    assert set(curves["csv"]) >= {"train/nll", "val/bleu4"}
    assert list(left_out) == ["none"] and "no logs (metrics.csv or TensorBoard event files)" in left_out["none"]


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
