"""How sure a comparison over seeds is: a 95% interval over each group's seeds, and a paired test between two
groups scored on the same test images (`caption compare A... --against B...`). Plain numpy and math, no scipy.

Over seeds (`seed_interval`), for the n seeds' scores x_1..x_n of one group and metric:
    mean       = x̄ = Σ x_j / n
    s          = √(Σ (x_j − x̄)² / (n − 1))                      (the sample standard deviation)
    half-width = t_{0.975, n−1} · s / √n,   interval = mean ± half-width   (Student's t)
t_{0.975, ν} is Student's t 97.5% quantile, computed for any ν > 0, whole or not (`t_quantile`: the t
distribution function through the regularised incomplete beta function, inverted by Newton's method). One seed gives
no interval (None). A seed whose score is missing (NaN: METEOR without Java) is left out of n.

Between two groups A and B (`paired_test`), B − A on one metric, from each run's per-image sufficient statistics
(`caption.evaluation.image_scores`: BLEU's counts, CIDEr-D's per-image scores, attention accuracy's hits and object
words). Run j of group g scores x_gj on the N test images (its corpus score); every run is scored on the same images.
    d      = x̄_B − x̄_A                                           (the difference of the groups' mean scores)
Two things make d vary: which seeds were trained (each run its own offset), and which test images were drawn. Each
is estimated where it shows:
    seeds:  s_g² = Σ_j (x_gj − x̄_g)² / (n_g − 1)                 (each group's spread over its seeds, as above)
    images: the delete-one-image jackknife. x_gj(i) is run gj's corpus score on the images but i, recomputed from the
            summed statistics (BLEU-4's precisions and brevity penalty on that corpus; CIDEr-D the mean of the other
            images' scores; attention accuracy Σ hits / Σ words), and for values θ(i), i = 1..N,
                J[θ] = (N − 1)/N · Σ_i (θ(i) − θ̄)²                 (θ̄ the mean of the θ(i))
            J_d   = J[x̄_B(i) − x̄_A(i)]          how the groups' difference moves with the images (paired: the same
                                                  images for both groups)
            W_g   = n_g/(n_g − 1) · mean_j J[x_gj(i) − x̄_g(i)]    each run's own image-by-image noise, which s_g²
                                                  already holds (its expectation there is W_g)
The variance of d and its degrees of freedom (Welch–Satterthwaite):
    V      = s_A²/n_A + s_B²/n_B + I,        I = max(0, J_d − W_A/n_A − W_B/n_B)
    ν      = V² / ((s_A²/n_A)²/(n_A − 1) + (s_B²/n_B)²/(n_B − 1) + I²/(N − 1))
    95% interval d ± t_{0.975, ν} · √V,  two-sided p = 2 · (1 − F_ν(|d| / √V))   (F_ν Student's t distribution)
The seeds' term carries the runs' noise on these images; I adds how the two recipes differ from image to image,
which no spread over seeds shows; with both estimated, the interval speaks for the two recipes on images like
these (`scope` "recipes"). With one seed in a group there is no seed variance: V = J_d and ν = N − 1, an interval
over the test images for these trained models alone (`scope` "models"), which cannot speak for the recipes (that
takes two seeds per group at least). Checked by simulation (tests/reports/test_intervals.py,
benchmarks/paired_coverage.py): with 2, 3 and 5 seeds per group, whether seeds or images dominate, the interval
excludes a zero difference in about 5% of trials and covers a known one in about 95%.
CIDEr-D's document frequencies (and log N) stay those of the whole split when an image is left out: each image's
CIDEr-D is scored once, against the split's references (`caption.evaluation.image_scores`); BLEU-4 and attention
accuracy are recomputed exactly on every subset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from caption.evaluation.image_scores import ImageScores, corpus_bleu

LEVEL = 0.95  # every interval's coverage
PAIRED_METRICS = ("bleu4", "cider", "attention_accuracy")  # the metrics with per-image sufficient statistics
Scope = Literal["recipes", "models"]  # what a paired test speaks for: the training recipes, or these trained models


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (modified Lentz), taken on
    the side where it converges fast: I_x(a, b) = 1 − I_{1−x}(b, a)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - incomplete_beta(1.0 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-16:
            break
    return front * fraction / a


def t_distribution(t: float, degrees: float) -> float:
    """F_ν(t), Student's t distribution function with ν = `degrees` > 0:
    F_ν(t) = 1 − I_{ν/(ν+t²)}(ν/2, 1/2) / 2 for t ≥ 0, and F_ν(−t) = 1 − F_ν(t)."""
    if not degrees > 0:
        raise ValueError(f"Student's t needs degrees of freedom above 0, got {degrees}")
    if degrees > 1e7:  # the normal's, closer than the continued fraction there
        return 0.5 * math.erfc(-t / math.sqrt(2))
    tail = 0.5 * incomplete_beta(degrees / (degrees + t * t), degrees / 2, 0.5)
    return 1.0 - tail if t >= 0 else tail


def t_density(t: float, degrees: float) -> float:
    """Student's t density, Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) · (1 + t²/ν)^(−(ν+1)/2); the normal's for ν = ∞."""
    if degrees > 1e7:
        return math.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    return math.exp(math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2) - math.log(degrees * math.pi) / 2
                    - (degrees + 1) / 2 * math.log1p(t * t / degrees))


def t_quantile(degrees: float, probability: float = (1 + LEVEL) / 2) -> float:
    """t_{probability, ν}: the t with F_ν(t) = probability (0.975 by default, a 95% two-sided interval). Newton's
    method from the normal's quantile, which lies below t's; F_ν is concave above 0, so every step stays below the
    root and the steps shrink to it."""
    if not 0.5 <= probability < 1:
        raise ValueError(f"a quantile at or above the median, below 1: got {probability}")
    t_distribution(0.0, degrees)  # checks the degrees of freedom
    t = NormalDist().inv_cdf(probability)
    for _ in range(200):
        step = (probability - t_distribution(t, degrees)) / t_density(t, degrees)
        t += step
        if abs(step) <= 1e-13 * max(1.0, t):
            break
    return t


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
    """B − A on one metric over the same test images, with both groups' seeds (`paired_test`)."""

    metric: str
    difference: float  # d = x̄_B − x̄_A, the difference of the groups' mean scores on every image
    seed_variance: float | None  # s_A²/n_A + s_B²/n_B; None with one seed in a group
    image_variance: float  # I ("recipes"), or J_d ("models")
    degrees_of_freedom: float  # ν, Welch–Satterthwaite's (N − 1 for "models")
    low: float  # d − t_{0.975, ν} · √V
    high: float  # d + t_{0.975, ν} · √V
    p: float  # two-sided, 2 · (1 − F_ν(|d| / √V))
    scope: Scope  # "recipes" with two seeds or more in each group, else "models"

    @property
    def standard_error(self) -> float:
        """√V."""
        return math.sqrt((self.seed_variance or 0.0) + self.image_variance)

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


def left_out(runs: np.ndarray, corpus: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Each run's corpus score without each image, x(i): runs (S, N, K) -> (S, N), from the summed statistics less
    image i's (the jackknife's corpora, every score recomputed on its own: BLEU's brevity penalty included)."""
    return corpus(runs.sum(1, keepdims=True) - runs)


def jackknife(values: np.ndarray) -> np.ndarray:
    """J[θ] = (N − 1)/N · Σ_i (θ(i) − θ̄)² over the last axis: the jackknife's variance of a statistic whose value
    without image i is θ(i)."""
    images = values.shape[-1]
    return (images - 1) / images * ((values - values.mean(-1, keepdims=True)) ** 2).sum(-1)


def paired_test(a: Sequence[ImageScores], b: Sequence[ImageScores], *, metric: str) -> PairedTest | None:
    """B − A on `metric` ("bleu4", "cider" or "attention_accuracy"), `a` and `b` the per-image statistics of each
    group's runs (its seeds) on the same images: the module docstring's d, V, ν, interval and p. None when a run has
    no score on the images, or on the images but one (attention accuracy with object words on one image at most)."""
    if not a or not b:
        raise ValueError("a paired test needs at least one run in each group")
    image_ids = a[0].image_ids
    group_a, corpus = aligned(a, metric, image_ids)  # (n_A, N, K)
    group_b, _ = aligned(b, metric, image_ids)  # (n_B, N, K)
    images = len(image_ids)
    scores_a, scores_b = corpus(group_a.sum(1)), corpus(group_b.sum(1))  # (n_A,), (n_B,) each run on every image
    without_a, without_b = left_out(group_a, corpus), left_out(group_b, corpus)  # (n_A, N), (n_B, N)
    if images < 2 or not (np.isfinite(scores_a).all() and np.isfinite(scores_b).all()
                          and np.isfinite(without_a).all() and np.isfinite(without_b).all()):
        return None
    difference = float(scores_b.mean() - scores_a.mean())
    shifts = float(jackknife(without_b.mean(0) - without_a.mean(0)))  # J_d
    if min(len(a), len(b)) < 2:  # no seed variance: these two models, over the images
        return finish(metric, difference, None, shifts, images - 1, "models")
    seed_terms = [float(scores.var(ddof=1)) / len(scores) for scores in (scores_a, scores_b)]  # s_g² / n_g
    noise = [float(jackknife(without - without.mean(0)).mean()) / (len(without) - 1)
             for without in (without_a, without_b)]  # W_g / n_g = mean_j J[x_gj(i) − x̄_g(i)] / (n_g − 1)
    between = max(0.0, shifts - sum(noise))  # I
    denominator = sum(term ** 2 / (len(group) - 1) for term, group in zip(seed_terms, (a, b))) + between ** 2 / (
        images - 1)
    variance = sum(seed_terms) + between
    degrees = variance ** 2 / denominator if denominator > 0 else float("inf")
    return finish(metric, difference, sum(seed_terms), between, degrees, "recipes")


def finish(metric: str, difference: float, seed_variance: float | None, image_variance: float, degrees: float,
           scope: Scope) -> PairedTest:
    """The interval and p-value of d with variance V = seed_variance + image_variance and ν degrees of freedom; a
    zero V (every run the same on every image) gives the point d, with p 0, or 1 when d is 0."""
    error = math.sqrt((seed_variance or 0.0) + image_variance)
    if error == 0:
        return PairedTest(metric, difference, seed_variance, image_variance, degrees, difference, difference,
                          1.0 if difference == 0 else 0.0, scope)
    half_width = t_quantile(degrees) * error
    p = 2 * (1 - t_distribution(abs(difference) / error, degrees))
    return PairedTest(metric, difference, seed_variance, image_variance, degrees, difference - half_width,
                      difference + half_width, min(1.0, p), scope)
