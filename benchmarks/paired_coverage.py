"""How well `caption compare --against`'s paired test keeps its promise, by simulation where the answer is known: the
share of no-difference trials whose 95% interval excludes zero (a false positive; 5% promised) and the share of
trials with a known difference that the interval covers (95% promised), at 1, 2, 3 and 5 seeds per group, for
CIDEr-D and attention accuracy, with seeds or images dominating. With one seed the interval is for the two trained
models, not for their recipes (docs/attention.md): its false positives against the recipes' zero are expected.

    python benchmarks/paired_coverage.py                       # 1000 trials a cell (about 10 minutes)
    python benchmarks/paired_coverage.py --trials 50 --seeds 2 # a quick look

The groups: each run's per-image CIDEr-D scores, or attention hits of 1–3 object words per image, made of

    score(run j of group g, image i) = base + shift·[g = B] + difficulty_i + recipe_g,i + seed_g,j + noise_g,j,i

difficulty_i shared by both groups (the pairing removes it), recipe_g,i how a group's recipe fares on image i beyond
that (drawn anew each trial: the recipes do not differ on average), seed_g,j each run's own offset, noise each run's
own image by image. Attention accuracy takes the same sum through p = 0.5 + 0.3 · tanh(...) + shift, so that the
recipes' accuracies differ by `shift` exactly. `REGIMES` are the two where the interval can fail: seeds dominating
(few seeds, so their spread is known badly) and images dominating (recipes that differ image by image).
tests/reports/test_intervals.py asserts the same at 2, 3 and 5 seeds (tests/kit/groups.py reads this file). Writes
OUT/paired_coverage.json (default runs/paired_coverage/) and prints a table.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import numpy as np

from caption.evaluation.image_scores import ImageScores
from caption.reports.intervals import paired_test

REGIMES = {  # spreads (standard deviations) of seed_g,j, recipe_g,i and noise_g,j,i
    "seeds": {"seed_spread": 0.05, "recipe_spread": 0.0, "noise": 0.2},
    "images": {"seed_spread": 0.002, "recipe_spread": 0.3, "noise": 0.1},
}
SHIFTS = {"cider": 0.1, "attention_accuracy": 0.05}  # a known difference of B − A, in each metric's units


def simulated_groups(rng: np.random.Generator, *, metric: str, seeds: int, images: int = 200, shift: float = 0.0,
                     seed_spread: float, recipe_spread: float, noise: float,
                     seed_offsets: np.ndarray | None = None) -> tuple[list[ImageScores], list[ImageScores]]:
    """Groups A and B of `seeds` runs each on the same `images` new images; B's recipe `shift` above A's.
    `seed_offsets` (2, seeds) fixes the runs' offsets (the same trained models on new images)."""
    ids = tuple(range(images))
    difficulty = rng.normal(0, 0.5, images)  # (N,)
    offsets = rng.normal(0, seed_spread, (2, seeds)) if seed_offsets is None else seed_offsets  # (2, n)
    groups = []
    for group, offset in enumerate(offsets):
        recipe = rng.normal(0, recipe_spread, images)  # (N,)
        runs = []
        for seed in offset:
            score = difficulty + recipe + seed + rng.normal(0, noise, images)  # (N,)
            if metric == "cider":
                runs.append(ImageScores(ids, cider=2.0 + group * shift + score))
            else:
                words = rng.integers(1, 4, images)  # (N,)
                hits = rng.binomial(words, 0.5 + 0.3 * np.tanh(score) + group * shift)  # (N,)
                runs.append(ImageScores(ids, attention_hits=hits, object_words=words))
        groups.append(runs)
    return groups[0], groups[1]


def coverage(*, metric: str, regime: str, seeds: int, trials: int) -> dict[str, float]:
    """The false-positive rate and the coverage of one cell, over `trials` trials each (numpy seed: the seeds)."""
    rng = np.random.default_rng(seeds)
    false_positives = covered = 0
    for _ in range(trials):
        a, b = simulated_groups(rng, metric=metric, seeds=seeds, **REGIMES[regime])
        false_positives += paired_test(a, b, metric=metric).excludes_zero
        a, b = simulated_groups(rng, metric=metric, seeds=seeds, shift=SHIFTS[metric], **REGIMES[regime])
        test = paired_test(a, b, metric=metric)
        covered += test.low <= SHIFTS[metric] <= test.high
    return {"false_positives": false_positives / trials, "coverage": covered / trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000, help="trials a cell, with and without a difference")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 5], help="seeds per group")
    parser.add_argument("--out", type=Path, default=Path("runs/paired_coverage"))
    args = parser.parse_args()
    lines = ["| metric | dominating | seeds | false positives (5% promised) | coverage (95% promised) |",
             "|---|---|---:|---:|---:|"]
    cells = []
    for metric in SHIFTS:
        for regime in REGIMES:
            for seeds in args.seeds:
                found = coverage(metric=metric, regime=regime, seeds=seeds, trials=args.trials)
                cells.append({"metric": metric, "regime": regime, "seeds": seeds, **found})
                lines.append(f"| {metric} | {regime} | {seeds} | {100 * found['false_positives']:.1f}% | "
                             f"{100 * found['coverage']:.1f}% |")
                print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "paired_coverage.json").write_text(json.dumps(
        {"trials": args.trials, "date": str(date.today()), "regimes": REGIMES, "shifts": SHIFTS, "cells": cells},
        indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
