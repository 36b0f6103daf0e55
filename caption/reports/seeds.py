"""`caption compare A... --against B...`: groups of runs (one per seed) compared with how sure the comparison is.

Per group and metric, the mean over its seeds and its 95% Student-t interval; between the first group and each other
one, for BLEU-4, CIDEr-D and attention accuracy, the paired test over seeds and test images
(`caption.reports.intervals.paired_test`), with a verdict in words that says what it speaks for: the recipes (two
seeds or more in each group) or these trained models (one seed). DIR/comparison.json holds all of it: the groups,
their runs with each run's scores, per metric the mean, half-width and interval over the seeds ("intervals": {metric:
{mean, half_width, low, high, seeds}}), and the paired tests (difference, low, high, p, standard_error,
seed_variance, image_variance, degrees_of_freedom, scope, verdict); scores as fractions, missing ones null.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption.evaluation.metrics import METRICS
from caption.evaluation.report import GREEDY, METRIC_NAMES, SIDE_BY_SIDE, Evaluation
from caption.io.outputs import write_text
from caption.reports.intervals import (
    LEVEL, PAIRED_METRICS, PairedTest, SeedInterval, computed, paired_test, seed_interval,
)
from caption.reports.runs import Group

INTERVAL = "95% Student-t interval over seeds: mean ± t_{0.975, n-1} · s / √n (none for one seed)"
PAIRED_TEST = (
    "d = B's mean over its seeds − A's, on the same test images; its variance V = s_A²/n_A + s_B²/n_B (each group's "
    "spread over its seeds) + I (how the two groups' difference moves from image to image beyond each run's own "
    "noise, by the delete-one-image jackknife: BLEU-4 and attention accuracy recomputed on each corpus, CIDEr-D with "
    "the whole split's document frequencies); 95% interval d ± t_{0.975, ν} · √V with Welch–Satterthwaite's ν, "
    "two-sided p from Student's t. With one seed in a group: V the jackknife's over the images alone, ν = N − 1, an "
    "interval for these trained models, not for their recipes")


@dataclass(frozen=True)
class GroupScores:
    """One group's runs, their evaluations and each metric's mean and interval over them."""

    group: Group
    evaluations: list[Evaluation]  # one per run, in the order of group.models
    intervals: dict[str, SeedInterval]  # metric -> over the seeds

    @property
    def name(self) -> str:
        return self.group.name


@dataclass(frozen=True)
class Pairing:
    """Group B against group A (the first group) on one metric; `test` None when it cannot be made (`why`)."""

    a: str
    b: str
    metric: str
    test: PairedTest | None
    why: str = ""  # why there is no test


@dataclass(frozen=True)
class SeedComparison:
    groups: list[GroupScores]
    pairings: list[Pairing]


def run_scores(evaluation: Evaluation) -> dict[str, float]:
    """The scores of a run the table shows: the coco-caption metrics, then where attention looked and α entropy;
    beside a beam, greedy decoding's BLEU-4, CIDEr-D and attention accuracy (greedy/bleu4 ...)."""
    greedy = {} if evaluation.greedy is None else evaluation.greedy.logged()
    return {name: evaluation.scores[name] for name in METRICS if name in evaluation.scores} | \
        evaluation.attention_scores() | {f"{GREEDY}{name}": greedy[name] for name in SIDE_BY_SIDE if name in greedy}


def side_by_side(group: GroupScores) -> str | None:
    """One line: the group's beam beside greedy decoding, each figure's mean ± half-width over its seeds (in %)."""
    cells = [f"{METRIC_NAMES[name]} {interval_text(group.intervals[name])} / "
             f"{interval_text(group.intervals[GREEDY + name])}"
             for name in SIDE_BY_SIDE if name in group.intervals and GREEDY + name in group.intervals]
    beam = group.evaluations[0].beam_size
    return f"beam {beam} / greedy: " + ", ".join(cells) if cells else None


def interval_text(found: SeedInterval) -> str:
    """"89.5 ± 1.2" in %, "89.5" for one seed, "missing" without a score."""
    if found.seeds == 0:
        return "missing"
    return points(found.mean) if found.half_width is None else f"{points(found.mean)} ± {points(found.half_width)}"


def compare_seeds(groups: list[Group], evaluations: list[list[Evaluation]]) -> SeedComparison:
    """Each group's intervals over its seeds, and each later group's paired tests against the first."""
    scored = []
    for group, evaluated in zip(groups, evaluations):
        runs = [run_scores(evaluation) for evaluation in evaluated]
        metrics = list(dict.fromkeys(name for scores in runs for name in scores))
        scored.append(GroupScores(group, evaluated, {
            name: seed_interval([scores.get(name, float("nan")) for scores in runs]) for name in metrics}))
    pairings = []
    first = scored[0]
    for other in scored[1:]:
        for metric in PAIRED_METRICS:
            per_image = [evaluation.per_image for evaluation in (*first.evaluations, *other.evaluations)]
            if any(scores is None or metric not in computed(scores) for scores in per_image):
                why = "the data has no object boxes" if metric == "attention_accuracy" else "not computed"
                pairings.append(Pairing(first.name, other.name, metric, None, why))
                continue
            test = paired_test([evaluation.per_image for evaluation in first.evaluations],
                               [evaluation.per_image for evaluation in other.evaluations], metric=metric)
            pairings.append(Pairing(first.name, other.name, metric, test, "" if test else "no object words generated"))
    return SeedComparison(scored, pairings)


def points(value: float) -> str:
    """A difference of scores in points of the table's % (two decimals)."""
    return f"{100 * value:.2f}"


def p_value(test: PairedTest) -> str:
    """p to three decimals, "< 0.001" below that."""
    return "< 0.001" if test.p < 0.0005 else f"{test.p:.3f}"


def verdict(pairing: Pairing) -> str:
    """The test in words, in points of the table's %: "hard's BLEU-4 is 3.10 below soft's, 95% interval [-5.02,
    -1.05]: outside zero (p = 0.002)", and with one seed in a group what it cannot say."""
    metric = METRIC_NAMES[pairing.metric]
    test = pairing.test
    if test is None:
        return f"{metric}: no paired test ({pairing.why})"
    if test.difference == 0:
        said = f"{pairing.b}'s {metric} is the same as {pairing.a}'s"
    else:
        side = "above" if test.difference > 0 else "below"
        said = f"{pairing.b}'s {metric} is {points(abs(test.difference))} {side} {pairing.a}'s"
    where = "outside zero" if test.excludes_zero else "zero inside it: no difference shown"
    p = p_value(test)
    said = f"{said}, 95% interval [{points(test.low)}, {points(test.high)}]: {where} (p {p if '<' in p else '= ' + p})"
    if test.scope == "models":
        return (f"{said}; over the test images for these trained models only: with one seed in a group it cannot "
                "speak for the recipes (train two seeds each at least)")
    return said


def number(value: float | None) -> float | None:
    """A JSON number, null for a missing (NaN) one."""
    return None if value is None or not math.isfinite(value) else float(value)


def interval_json(found: SeedInterval) -> dict[str, Any]:
    """A metric over a group's seeds: its mean, half-width and interval (low, high: null for one seed) and on how many
    seeds it stands."""
    interval = found.interval
    return {"mean": number(found.mean), "half_width": number(found.half_width),
            "low": None if interval is None else number(interval[0]),
            "high": None if interval is None else number(interval[1]), "seeds": found.seeds}


def comparison_json(comparison: SeedComparison, *, split: str, dataset: str | None) -> dict[str, Any]:
    """What DIR/comparison.json holds."""
    groups = []
    for scored in comparison.groups:
        groups.append({
            "name": scored.name,
            "seeds": len(scored.group.models),
            "runs": [{"name": model.name, "checkpoint": str(model.checkpoint), "results": f"{model.name}/",
                      "scores": {name: number(value) for name, value in run_scores(evaluation).items()}}
                     for model, evaluation in zip(scored.group.models, scored.evaluations)],
            "intervals": {name: interval_json(found) for name, found in scored.intervals.items()},
        })
    tests = []
    for pairing in comparison.pairings:
        test = pairing.test
        tests.append({
            "a": pairing.a, "b": pairing.b, "metric": pairing.metric,
            "difference": None if test is None else number(test.difference),
            "low": None if test is None else number(test.low),
            "high": None if test is None else number(test.high),
            "p": None if test is None else number(test.p),
            "standard_error": None if test is None else number(test.standard_error),
            "seed_variance": None if test is None else number(test.seed_variance),
            "image_variance": None if test is None else number(test.image_variance),
            "degrees_of_freedom": None if test is None else number(test.degrees_of_freedom),
            "scope": None if test is None else test.scope,
            "verdict": verdict(pairing),
        })
    images = len(comparison.groups[0].evaluations[0].captions)
    return {"split": split, "dataset": dataset, "images": images, "interval": INTERVAL,
            "paired_test": {"method": PAIRED_TEST, "difference": "B − A", "level": LEVEL},
            "groups": groups, "paired_tests": tests}


def write_comparison(comparison: SeedComparison, *, split: str, dataset: str | None, out: Path) -> Path:
    """DIR/comparison.json (`comparison_json`)."""
    path = out / "comparison.json"
    write_text(path, json.dumps(comparison_json(comparison, split=split, dataset=dataset), indent=2,
                                ensure_ascii=False) + "\n")
    return path
