"""`caption compare A B --against C D`: groups of runs (seeds) evaluated on the same split, a row per group with
each metric's mean ± its 95% t interval over the seeds, a paired test of BLEU-4, CIDEr-D and attention accuracy in
words, every run's results in DIR/<group>/<run>/, and DIR/comparison.json with all of it; the curves of a group
drawn as its mean over its runs' min–max band."""

import json
import math
import shutil
import sys

import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection

from caption.cli import main
from caption.errors import ConfigError
from caption.evaluation.grounding import Localisation
from caption.evaluation.image_scores import ImageScores
from caption.evaluation.report import Evaluation
from caption.reports.beam_sizes import beam_size_row, beam_size_table, beam_sizes_figure
from caption.reports.figures import curves_figure, panel_lines
from caption.reports.intervals import paired_test, seed_interval
from caption.reports.runs import read_groups, run_names
from caption.reports.seeds import Pairing, verdict


def second_seed(run, to, *, seed):
    """A copy of the tiny run `run` whose checkpoints hold other weights (its own perturbed): another model of the
    same recipe, with the same logs."""
    shutil.copytree(run, to)
    generator = torch.Generator().manual_seed(seed)
    for path in (to / "checkpoints").glob("*.ckpt"):
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
        for weights in checkpoint["state_dict"].values():
            if weights.is_floating_point() and weights.numel() > 1:
                weights += 0.5 * weights.std() * torch.randn(weights.shape, generator=generator)
        torch.save(checkpoint, path)
    return to


@pytest.mark.slow  # the tiny runs (conftest.py)
def test_compare_groups_of_seeds_writes_intervals_and_the_paired_test(tiny_runs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["caption"])
    soft = [shutil.copytree(tiny_runs["soft"], tmp_path / "soft_seed0"),
            second_seed(tiny_runs["soft"], tmp_path / "soft_seed1", seed=1)]
    hard = [shutil.copytree(tiny_runs["hard"], tmp_path / "hard_seed0"),
            second_seed(tiny_runs["hard"], tmp_path / "hard_seed1", seed=2)]
    out = tmp_path / "report"
    main(["compare", *map(str, soft), "--against", *map(str, hard), "--predictions.out", str(out), "--images", "1"])
    printed = capsys.readouterr().out
    assert "| soft (ours, 2 seeds) |" in printed and "paired test" in printed and "comparison.json" in printed

    comparison = json.loads((out / "comparison.json").read_text())
    assert [group["name"] for group in comparison["groups"]] == ["soft", "hard"]
    for group, runs in zip(comparison["groups"], (soft, hard)):
        assert [run["name"] for run in group["runs"]] == [f"{group['name']}/{run.name}" for run in runs]
        assert group["seeds"] == 2
        for run in group["runs"]:
            scores = json.loads((out / run["results"] / "metrics.json").read_text())["metrics"]
            assert run["scores"]["bleu4"] == scores["bleu4"] and run["scores"]["cider"] == scores["cider"]
        bleu4 = [run["scores"]["bleu4"] for run in group["runs"]]
        found = group["intervals"]["bleu4"]
        assert found["mean"] == pytest.approx(sum(bleu4) / 2) and found["seeds"] == 2
        half = 12.7062047362 * abs(bleu4[0] - bleu4[1]) / math.sqrt(2) / math.sqrt(2)  # t_{0.975,1} · s / √n
        assert found["half_width"] == pytest.approx(half, abs=1e-12)
        assert (found["low"], found["high"]) == (pytest.approx(found["mean"] - half, abs=1e-12),
                                                 pytest.approx(found["mean"] + half, abs=1e-12))
    tests = {test["metric"]: test for test in comparison["paired_tests"]}
    assert list(tests) == ["bleu4", "cider", "attention_accuracy"]
    means = {group["name"]: {name: found["mean"] for name, found in group["intervals"].items()}
             for group in comparison["groups"]}
    for metric, test in tests.items():
        assert (test["a"], test["b"]) == ("soft", "hard")
        if test["difference"] is None:  # attention accuracy of a tiny model that names no object
            assert metric == "attention_accuracy" and "no paired test" in test["verdict"]
            continue
        assert test["difference"] == pytest.approx(means["hard"][metric] - means["soft"][metric])
        assert test["low"] <= test["difference"] <= test["high"] and 0 <= test["p"] <= 1
        assert test["scope"] == "recipes" and test["degrees_of_freedom"] > 0 and test["seed_variance"] >= 0
        named = {"bleu4": "BLEU-4", "cider": "CIDEr", "attention_accuracy": "attention accuracy"}[metric]
        assert test["verdict"].startswith(f"hard's {named} is ")
        assert "95% interval [" in test["verdict"] and "zero" in test["verdict"]

    report = (out / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| soft (ours, 2 seeds) |"))
    bleu4_cell = row.split(" | ")[4]
    mean, half = (comparison["groups"][0]["intervals"]["bleu4"][key] for key in ("mean", "half_width"))
    assert bleu4_cell == f"{100 * mean:.1f} ± {100 * half:.1f}"
    assert "## Paired test" in report and "| BLEU-4 | hard − soft |" in report
    assert tests["bleu4"]["verdict"] in report
    assert "## Runs" in report and "| soft/soft_seed1 (ours) |" in report and "| hard/hard_seed0 (ours) |" in report
    assert "min–max over seeds" in report and (out / "curves.png").is_file()
    # greedy decoding beside the beam, over the seeds as well: in the JSON, the report and the console
    greedy = comparison["groups"][0]["intervals"]["greedy/bleu4"]
    assert greedy["seeds"] == 2 and greedy["mean"] == pytest.approx(sum(
        json.loads((out / run["results"] / "metrics.json").read_text())["greedy"]["bleu4"]
        for run in comparison["groups"][0]["runs"]) / 2)
    beside = next(line for line in report.splitlines() if line.startswith("- soft: beam 3 / greedy: BLEU-4 "))
    assert f"/ {100 * greedy['mean']:.2f} ± {100 * greedy['half_width']:.2f}" in beside and beside in f"- {printed}"
    assert len(list(out.glob("overlays-*.png"))) == 1
    for group, runs in (("soft", soft), ("hard", hard)):
        assert all((out / group / run.name / "captions.json").is_file() for run in runs)

    # a group of one: its results in DIR/<group>/, no interval, the paired test over the images alone
    single = tmp_path / "single"
    main(["compare", str(soft[0]), "--against", str(hard[0]), "--names", "a", "b", "--predictions.out", str(single),
          "--images", "0"])
    report = (single / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| a (ours, 1 seed: no interval) |"))
    assert "±" not in row
    assert (single / "a" / "metrics.json").is_file() and (single / "b" / "metrics.json").is_file()
    alone = json.loads((single / "comparison.json").read_text())["groups"][0]["intervals"]["bleu4"]
    assert alone["half_width"] is None and alone["low"] is None and alone["seeds"] == 1
    with pytest.raises(ConfigError, match="one per group"):
        read_groups([soft, hard], names=["only"], device="cpu", config=None)


def test_a_run_is_named_by_its_folder_or_else_its_position(tmp_path):
    (tmp_path / "seed0" / "checkpoints").mkdir(parents=True)
    (tmp_path / "seed1").mkdir()
    given = [tmp_path / "seed0" / "checkpoints" / "last.ckpt", tmp_path / "seed1"]
    assert run_names(given, [given[0], tmp_path / "seed1" / "checkpoints" / "best.ckpt"]) == ["seed0", "seed1"]
    twice = [tmp_path / "seed1", tmp_path / "seed1"]
    assert run_names(twice, [path / "checkpoints" / "last.ckpt" for path in twice]) == ["1", "2"]


def test_a_group_of_runs_is_its_mean_over_their_min_max_band():
    """Runs of one config log the same steps: one line per group, the mean at each step, the band from the lowest
    to the highest run; a group of one run stays its own line, named as it."""
    curves = {"soft/seed0": {"val/bleu4": [(10, 0.2), (20, 0.4)]}, "soft/seed1": {"val/bleu4": [(10, 0.4), (20, 0.8)]},
              "soft/seed2": {"val/bleu4": [(10, 0.3), (20, 0.3)]}, "hard": {"val/bleu4": [(10, 0.1), (20, 0.2)]}}
    groups = {"soft": ["soft/seed0", "soft/seed1", "soft/seed2"], "hard": ["hard"]}
    mean, alone = panel_lines(curves, "val/bleu4", groups)
    assert mean.label == "soft (mean of 3 runs)" and mean.steps == [10, 20]
    assert mean.values == [pytest.approx(0.3), pytest.approx(0.5)] and mean.band == ([0.2, 0.3], [0.4, 0.8])
    assert (alone.label, alone.steps, alone.values, alone.band) == ("hard", [10, 20], [0.1, 0.2], None)
    ax = curves_figure(curves, groups).axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["soft (mean of 3 runs)", "hard"]
    assert len(ax.collections) == 1, "one band"
    assert [line.label for line in panel_lines(curves, "val/bleu4", None)] == list(curves), "without groups: each run"


@pytest.mark.slow  # the tiny runs (conftest.py)
def test_compare_groups_at_several_beam_sizes_gives_each_groups_interval_over_its_seeds(tiny_runs, tmp_path,
                                                                                        monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["caption"])
    soft = [shutil.copytree(tiny_runs["soft"], tmp_path / "soft_seed0"),
            second_seed(tiny_runs["soft"], tmp_path / "soft_seed1", seed=1)]
    out = tmp_path / "report"
    main(["compare", *map(str, soft), "--against", str(tiny_runs["hard"]), "--predictions.out", str(out),
          "--images", "0", "--beam_sizes", "1", "2"])
    printed = capsys.readouterr().out
    numbers = json.loads((out / "beam_sizes.json").read_text())
    groups = json.loads((out / "comparison.json").read_text())["groups"]
    assert [row["name"] for row in numbers["models"]] == ["soft", "hard"] and numbers["beam_sizes"] == [1, 2]
    for row, group in zip(numbers["models"], groups):
        assert row["runs"] == [run["name"] for run in group["runs"]]
        greedy = [json.loads((out / run["results"] / "metrics.json").read_text())["greedy"] for run in group["runs"]]
        for entry in row["scores"]:
            for metric in numbers["metrics"]:
                found = entry[metric]
                if entry["beam_size"] == 1:
                    assert found["runs"] == [scores[metric] for scores in greedy], "beam 1: greedy decoding's"
                expected = seed_interval([math.nan if value is None else value for value in found["runs"]])
                assert found["seeds"] == expected.seeds
                assert found["half_width"] == (None if expected.half_width is None else
                                               pytest.approx(expected.half_width, abs=1e-12))
                assert found["mean"] == (None if expected.seeds == 0 else pytest.approx(expected.mean, abs=1e-12))
    report = (out / "report.md").read_text()
    assert "## Grounding against beam size" in report and "](beam_sizes.png)" in report
    assert (out / "beam_sizes.png").is_file()
    bleu4 = numbers["models"][0]["scores"][1]["bleu4"]
    row = f"| soft (2 seeds) | 2 | {100 * bleu4['mean']:.1f} ± {100 * bleu4['half_width']:.1f} |"
    assert row in report and row in printed


def test_a_group_at_each_beam_size_is_its_mean_and_interval_over_seeds_drawn_as_error_bars_and_seeds():
    def run(bleu4, accuracy):
        located = Localisation(nouns=10, accuracy=accuracy, other_object=0.0, background=1 - accuracy, absent=0.0,
                               chance_location=0.1, chance_object=0.5)
        at = {size: Evaluation("test", size, {"bleu4": bleu4 / size, "cider": 1.0}, {}, located) for size in (1, 3)}
        return Evaluation("test", 3, {}, {}, beam_sizes=at)

    seeds = {"soft/seed0": run(0.2, 0.9), "soft/seed1": run(0.4, 0.7), "soft/seed2": run(0.3, 0.8)}
    soft = beam_size_row("soft", seeds)
    hard = beam_size_row("hard", {"hard": run(0.5, 0.6)})
    assert list(soft.intervals) == [1, 3] and soft.scores[3]["bleu4"] == [0.2 / 3, 0.4 / 3, 0.3 / 3]
    assert soft.intervals[3]["bleu4"] == seed_interval([0.2 / 3, 0.4 / 3, 0.3 / 3])
    assert soft.intervals[1]["attention_accuracy"] == seed_interval([0.9, 0.7, 0.8])
    assert hard.intervals[1]["bleu4"].half_width is None, "one run: no interval"
    table = beam_size_table([soft, hard]).splitlines()
    assert table[0] == "| group | beam size | BLEU-4 | CIDEr | attention accuracy |"
    assert table[2] == "| soft (3 seeds) | 1 | 30.0 ± 24.8 | 100.0 ± 0.0 | 80.0 ± 24.8 |"
    assert table[5] == "| hard | 3 | 16.7 | 100.0 | 60.0 |"
    panels = beam_sizes_figure([soft, hard]).axes
    assert [ax.get_title() for ax in panels] == ["BLEU-4", "CIDEr", "attention accuracy"]
    soft_line, hard_line = panels[0].containers
    assert list(soft_line.lines[0].get_xdata()) == [1, 3] and soft_line.has_yerr and not hard_line.has_yerr
    assert soft_line.lines[0].get_ydata()[0] == pytest.approx(30.0)
    scattered = [found for found in panels[0].collections if isinstance(found, PathCollection)]
    assert len(scattered) == 1, "the group's seeds, each its own dot; none for one run"
    assert sorted(map(tuple, scattered[0].get_offsets().tolist()))[:3] == [
        (1, pytest.approx(20.0)), (1, pytest.approx(30.0)), (1, pytest.approx(40.0))]


def test_the_verdict_says_what_a_test_speaks_for():
    """Two seeds a group: a verdict on the recipes. One seed in a group: an interval for these two trained models
    only, which says it cannot speak for the recipes; a p below 0.001 reads "p < 0.001"."""
    ids = tuple(range(50))
    rng = np.random.default_rng(0)
    runs = lambda seeds, shift: [ImageScores(ids, cider=rng.random(50) + shift) for _ in range(seeds)]
    recipes = verdict(Pairing("soft", "hard", "cider", paired_test(runs(2, 0), runs(2, 0.3), metric="cider")))
    models = verdict(Pairing("soft", "hard", "cider", paired_test(runs(1, 0), runs(3, 0.3), metric="cider")))
    assert recipes.startswith("hard's CIDEr is ") and "cannot speak for the recipes" not in recipes
    assert "these trained models only" in models and "cannot speak for the recipes" in models
    assert "(p < 0.001)" in models and "p = <" not in models
