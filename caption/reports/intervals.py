"""How sure a comparison over seeds is: a 95% interval over each group's seeds, and a paired bootstrap test between
two groups scored on the same test images (`caption compare A... --against B...`). Plain numpy, no scipy.

Over seeds (`seed_interval`), for the n seeds' scores x_1..x_n of one group and metric:
    mean       = x̄ = Σ x_j / n
    s          = √(Σ (x_j − x̄)² / (n − 1))                      (the sample standard deviation)
    half-width = t_{0.975, n−1} · s / √n,   interval = mean ± half-width   (Student's t)
t_{0.975, ν} is read from `T_975`, Student's t 97.5% quantile for ν = 1..30 degrees of freedom (4.303 for ν = 2),
and is the normal's 1.96 beyond (at ν = 30 the two differ by 4%). One seed gives no interval (None). A seed whose
score is missing (NaN: METEOR without Java) is left out of n.

Between two groups A and B (`paired_bootstrap`), B − A on one metric, from each run's per-image sufficient statistics
(`caption.evaluation.image_scores`: BLEU's counts, CIDEr-D's per-image scores, attention accuracy's hits and object
words). Each of R replicates (a hierarchical bootstrap):
    1. draws, with replacement, n_A of A's seeds and n_B of B's seeds (each group's own runs: not paired);
    2. draws N of the N test images with replacement, the same images for both groups (they share the images:
       paired), as counts w_i of each image;
    3. recomputes each drawn seed's corpus metric from its statistics summed with the weights w (BLEU-4 as
       pycocoevalcap computes it from summed counts, CIDEr-D the weighted mean of per-image scores, attention
       accuracy Σ w·hits / Σ w·words), averages them over the group's drawn seeds, and records
       d_r = mean_B − mean_A.
Reported: the difference of the two groups' means on all images and seeds (`difference`, what the table shows), the
mean of the d_r (`bootstrap_mean`), the 95% percentile interval [2.5%, 97.5%] of the d_r, and the two-sided bootstrap
p-value p = min(1, 2 · min(share of d_r ≤ 0, share of d_r ≥ 0)) (0 when no replicate reaches 0: then p < 1/R).
A replicate whose drawn images hold no object word has no attention accuracy and is left out (`replicates` counts
those kept). Seeded (`numpy.random.default_rng(seed)`), so a report is reproducible; vectorised: the replicates'
image weights are one (R, N) matrix, each metric one product with the (seeds, N, statistics) array, in chunks of
replicates that keep memory small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from caption.evaluation.image_scores import ImageScores, corpus_bleu

# Student's t, 97.5% quantile, for 1..30 degrees of freedom (three decimals, as printed in statistics tables)
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
NORMAL_975 = 1.96  # beyond 30 degrees of freedom
REPLICATES = 2000
BOOTSTRAP_SEED = 0
CHUNK = 4_000_000  # replicates × images weighed at a time
PAIRED_METRICS = ("bleu4", "cider", "attention_accuracy")  # the metrics with per-image sufficient statistics


def t_quantile(degrees: int) -> float:
    """t_{0.975, degrees}: `T_975` up to 30 degrees of freedom, the normal's 1.96 beyond."""
    if degrees < 1:
        raise ValueError(f"Student's t needs at least 1 degree of freedom, got {degrees}")
    return T_975[degrees - 1] if degrees <= len(T_975) else NORMAL_975


@dataclass(frozen=True)
class SeedInterval:
    """One group's metric over its seeds: the mean and its 95% Student-t interval (None with one seed)."""

    mean: float  # NaN when no seed has the score
    half_width: float | None  # t_{0.975, n−1} · s / √n; None for n < 2
    seeds: int  # n, the seeds with the score

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.half_width is None else (self.mean - self.half_width, self.mean + self.half_width)


def seed_interval(values: Sequence[float]) -> SeedInterval:
    """The mean of the seeds' scores and its 95% interval, mean ± t_{0.975, n−1} · s / √n (NaNs left out)."""
    finite = np.array([value for value in values if value is not None and math.isfinite(value)], dtype=np.float64)
    if not len(finite):
        return SeedInterval(float("nan"), None, 0)
    mean = float(finite.mean())
    if len(finite) < 2:
        return SeedInterval(mean, None, 1)
    spread = float(finite.std(ddof=1))
    return SeedInterval(mean, t_quantile(len(finite) - 1) * spread / math.sqrt(len(finite)), len(finite))


@dataclass(frozen=True)
class PairedTest:
    """B − A on one metric, paired over the test images, over both groups' seeds (`paired_bootstrap`)."""

    metric: str
    difference: float  # mean over B's seeds − mean over A's seeds, on every image
    bootstrap_mean: float  # the mean of the replicates' differences
    low: float  # the 2.5% percentile of the replicates' differences
    high: float  # the 97.5% percentile
    p: float  # two-sided bootstrap p-value
    replicates: int  # kept (a replicate without object words has no attention accuracy)

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


Statistics = tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]  # (N, K) per image, summed (..., K) -> (...)


def statistics(scores: ImageScores, metric: str) -> Statistics:
    """One run's per-image sufficient statistics of `metric` (N, K) and how the corpus score follows from their sum
    over a set of images (..., K) -> (...)."""
    if metric == "bleu4" and scores.bleu is not None:
        return scores.bleu.stacked(), lambda summed: corpus_bleu(summed)[..., 3]
    if metric == "cider" and scores.cider is not None:
        stacked = np.stack([scores.cider, np.ones_like(scores.cider)], axis=1)  # score, image
        return stacked, lambda summed: summed[..., 0] / summed[..., 1]
    if metric == "attention_accuracy" and scores.attention_hits is not None and scores.object_words is not None:
        stacked = np.stack([scores.attention_hits, scores.object_words], axis=1).astype(np.float64)
        return stacked, ratio
    raise ValueError(f"no per-image statistics of {metric} (computed: {computed(scores)})")


def ratio(summed: np.ndarray) -> np.ndarray:
    """hits / words, NaN where there is no word."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(summed[..., 1] > 0, summed[..., 0] / summed[..., 1], np.nan)


def computed(scores: ImageScores) -> list[str]:
    """The metrics of PAIRED_METRICS whose per-image statistics `scores` holds."""
    present = {"bleu4": scores.bleu is not None, "cider": scores.cider is not None,
               "attention_accuracy": scores.attention_hits is not None}
    return [metric for metric in PAIRED_METRICS if present[metric]]


def aligned(runs: Sequence[ImageScores], metric: str, image_ids: tuple[int, ...]) -> tuple[np.ndarray, Callable]:
    """The runs' statistics of `metric` in the order of `image_ids`: (S, N, K), and the corpus function."""
    stacked, corpus = [], None
    for run in runs:
        if set(run.image_ids) != set(image_ids):
            raise ValueError("the runs of a paired test must be scored on the same images")
        values, corpus = statistics(run, metric)
        position = {image_id: index for index, image_id in enumerate(run.image_ids)}
        stacked.append(values[[position[image_id] for image_id in image_ids]])
    return np.stack(stacked), corpus


def weighed(weights: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Each replicate's sums of each run's statistics: weights (R, N), runs (S, N, K) -> (R, S, K), one product."""
    seeds, images, columns = runs.shape
    flat = runs.transpose(1, 0, 2).reshape(images, seeds * columns)  # (N, S·K)
    return (weights @ flat).reshape(len(weights), seeds, columns)


def paired_bootstrap(a: Sequence[ImageScores], b: Sequence[ImageScores], *, metric: str,
                     replicates: int = REPLICATES, seed: int = BOOTSTRAP_SEED) -> PairedTest:
    """B − A on `metric` ("bleu4", "cider" or "attention_accuracy"), `a` and `b` the per-image statistics of each
    group's runs (its seeds) on the same images: the hierarchical paired bootstrap of the module's docstring."""
    if not a or not b:
        raise ValueError("a paired test needs at least one run in each group")
    image_ids = a[0].image_ids
    group_a, corpus = aligned(a, metric, image_ids)  # (S_A, N, K)
    group_b, _ = aligned(b, metric, image_ids)  # (S_B, N, K)
    images = len(image_ids)
    difference = float(corpus(group_b.sum(1)).mean() - corpus(group_a.sum(1)).mean())
    generator = np.random.default_rng(seed)
    drawn = []
    step = max(1, CHUNK // max(images, 1))
    for start in range(0, replicates, step):
        count = min(step, replicates - start)
        picks = generator.integers(0, images, size=(count, images))  # (R, N) image indices
        flat = (np.arange(count)[:, None] * images + picks).ravel()
        weights = np.bincount(flat, minlength=count * images).reshape(count, images).astype(np.float64)  # (R, N)
        seeds_a = generator.integers(0, len(a), size=(count, len(a)))  # (R, S_A)
        seeds_b = generator.integers(0, len(b), size=(count, len(b)))  # (R, S_B)
        score_a = corpus(weighed(weights, group_a))  # (R, S_A) each seed on the drawn images
        score_b = corpus(weighed(weights, group_b))  # (R, S_B)
        rows = np.arange(count)[:, None]
        drawn.append(score_b[rows, seeds_b].mean(1) - score_a[rows, seeds_a].mean(1))  # (R,)
    differences = np.concatenate(drawn)
    differences = differences[np.isfinite(differences)]
    if not len(differences):
        nan = float("nan")
        return PairedTest(metric, difference, nan, nan, nan, nan, 0)
    below, above = float(np.mean(differences <= 0)), float(np.mean(differences >= 0))
    low, high = np.percentile(differences, [2.5, 97.5])
    return PairedTest(metric, difference, float(differences.mean()), float(low), float(high),
                      min(1.0, 2 * min(below, above)), len(differences))
