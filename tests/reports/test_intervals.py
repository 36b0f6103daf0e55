"""How sure `caption compare --against` is: Student's t against stated values and closed forms, the interval over
seeds against a hand computation, the per-image sufficient statistics against pycocoevalcap's corpus scores (BLEU-4
summed, CIDEr-D averaged, attention accuracy summed) on the whole split and on each jackknife corpus, and the paired
test against hand and independent computations, and by simulation: with 2, 3 and 5 seeds its 95% interval keeps
its 95%."""

import math
import random
import time

import numpy as np
import pytest
import torch
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider

from caption.data.sources.records import ObjectBox
from caption.evaluation.grounding import localisation
from caption.evaluation.image_scores import BleuCounts, ImageScores, corpus_bleu
from caption.evaluation.metrics import score_captions
from caption.evaluation.scoring import Captioned, score_split
from caption.model.captions import Caption
from caption.reports.intervals import left_out, paired_test, seed_interval, statistics, t_distribution, t_quantile
from kit.groups import REGIMES, coverage, simulated_groups

BLEU_AND_CIDER = ("bleu1", "bleu2", "bleu3", "bleu4", "cider")


T_975 = {1: 12.7062047362, 2: 4.3026527297, 3: 3.1824463053, 5: 2.5705818356, 10: 2.2281388520,
         30: 2.0422724563, 40: 2.0210753903, 60: 2.0002978220, 120: 1.9799304051, math.inf: 1.9599639845}


def test_t_quantiles_are_students_at_every_degree_of_freedom():
    """t_{0.975, ν} against the values statistics tables give (to 10 digits), beyond 30 degrees of freedom too (a
    1.96 there would be 2–4% narrow), and t's distribution against its closed forms: ν = 1 (Cauchy), ν = 2."""
    for degrees, value in T_975.items():
        assert t_quantile(degrees) == pytest.approx(value, abs=2e-9), degrees
    assert t_quantile(1, 0.95) == pytest.approx(6.3137515147, abs=2e-9)
    for t in (0.0, 0.3, 1.0, 2.5, 40.0):
        assert t_distribution(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-14)
        assert t_distribution(-t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-14)
    between = [t_quantile(degrees) for degrees in (2, 2.5, 3, 30.5, 31)]
    assert all(a > b for a, b in zip(between, between[1:])), "fractional degrees (Welch's) fall in between"
    assert t_distribution(t_quantile(2.5), 2.5) == pytest.approx(0.975, abs=1e-12)
    for degrees in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            t_quantile(degrees)


def test_the_t_interval_over_three_seeds_is_the_hand_computed_one():
    """0.80, 0.84, 0.88: mean 0.84, s = 0.04, t_{0.975,2} = 4.3027, half-width 4.3027 · 0.04 / √3 = 0.09937."""
    found = seed_interval([0.80, 0.84, 0.88])
    assert found.mean == pytest.approx(0.84) and found.seeds == 3
    assert found.half_width == pytest.approx(T_975[2] * 0.04 / math.sqrt(3)) and found.half_width == pytest.approx(
        0.09937, abs=5e-6)
    assert found.interval == (pytest.approx(0.84 - 0.09937, abs=5e-6), pytest.approx(0.84 + 0.09937, abs=5e-6))


def test_one_seed_has_no_interval_and_a_missing_score_is_left_out():
    assert seed_interval([0.5]).half_width is None and seed_interval([0.5]).interval is None
    two = seed_interval([0.5, float("nan"), 0.7])  # METEOR missing on one seed
    assert two.seeds == 2 and two.half_width == pytest.approx(T_975[1] * math.sqrt(0.02) / math.sqrt(2))
    assert math.isnan(seed_interval([float("nan")]).mean) and seed_interval([]).seeds == 0


def test_bleu_counts_summed_give_the_hand_computed_corpus_bleu4():
    """Image 1, "a red circle left of a square" against "a red circle left of a blue square" (8 words, the closest
    to 7) and "a square": 1..4-grams correct 7/7, 6/6 ("a square" from the second reference), 4/5, 3/4. Image 2,
    "a blue square" against itself and "the square": 3/3, 2/2, 1/1, 0/0. Summed: 10/10, 8/8, 5/6, 3/4, length 10
    against 11: BLEU-4 = (1 · 1 · 5/6 · 3/4)^(1/4) · exp(1 − 11/10) = 0.80453."""
    candidates = {1: "a red circle left of a square", 2: "a blue square"}
    references = {1: ["a red circle left of a blue square", "a square"], 2: ["a blue square", "the square"]}
    per_image = ImageScores()
    scores = score_captions(candidates, references, metrics=BLEU_AND_CIDER, per_image=per_image)
    assert per_image.image_ids == (1, 2)
    assert per_image.bleu.correct.tolist() == [[7, 6, 4, 3], [3, 2, 1, 0]]
    assert per_image.bleu.guess.tolist() == [[7, 6, 5, 4], [3, 2, 1, 0]]
    assert per_image.bleu.hypothesis_length.tolist() == [7, 3] and per_image.bleu.reference_length.tolist() == [8, 3]
    hand = (5 / 6 * 3 / 4) ** 0.25 * math.exp(1 - 11 / 10)
    assert hand == pytest.approx(0.80453, abs=5e-6)
    assert corpus_bleu(per_image.bleu.stacked().sum(0))[3] == pytest.approx(hand, rel=1e-9)
    assert scores["bleu4"] == pytest.approx(hand, rel=1e-9)


def random_captions(seed: int, images: int = 60) -> tuple[dict[int, str], dict[int, list[str]]]:
    """Captions and 1..5 references per image from a small vocabulary: many shared n-grams, some empty captions."""
    rng = random.Random(seed)
    words = "a the red blue green circle square triangle left of right small large is".split()
    sentence = lambda low, high: " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))
    candidates = {image: sentence(0, 10) for image in range(images)}
    references = {image: [sentence(1, 10) for _ in range(rng.randint(1, 5))] for image in range(images)}
    return candidates, references


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_image_statistics_reproduce_pycocoevalcap_on_random_captions(seed):
    """BLEU-1..4 from the summed counts and CIDEr-D's per-image mean equal pycocoevalcap's corpus scores called
    directly; a subset's summed counts equal pycocoevalcap's corpus BLEU of that subset alone."""
    candidates, references = random_captions(seed)
    per_image = ImageScores()
    scores = score_captions(candidates, references, metrics=BLEU_AND_CIDER, per_image=per_image)
    hypotheses = {image: [text] for image, text in candidates.items()}
    bleu, _ = Bleu(4).compute_score(references, hypotheses, verbose=0)
    assert corpus_bleu(per_image.bleu.stacked().sum(0)) == pytest.approx(bleu, rel=1e-12, abs=1e-300)
    assert [scores[f"bleu{n}"] for n in range(1, 5)] == bleu
    cider, _ = Cider().compute_score(references, hypotheses)
    assert per_image.cider.mean() == pytest.approx(cider, rel=1e-12) and scores["cider"] == cider
    subset = sorted(random.Random(seed).sample(range(len(candidates)), 20))
    alone, _ = Bleu(4).compute_score({i: references[i] for i in subset}, {i: hypotheses[i] for i in subset},
                                     verbose=0)
    assert corpus_bleu(per_image.bleu.stacked()[subset].sum(0)) == pytest.approx(alone, rel=1e-12, abs=1e-300)


def test_attention_counts_per_image_sum_to_the_accuracy():
    """Per image, the object words whose peak is on the named object and all its object words (an image without
    boxes: 0 of each); their sums' ratio is the localisation's accuracy."""
    circle, square = ObjectBox("circle", (0, 0, 32, 32)), ObjectBox("square", (32, 32, 64, 64))
    top_left, bottom_right = torch.eye(4)[0], torch.eye(4)[3]  # α on a 2 × 2 grid of a 64 × 64 image

    def item(image_id, words, alpha, objects):
        caption = Caption(" ".join(words), list(words), torch.stack(alpha), torch.ones(len(words)), None, 0.0)
        return Captioned(image_id, caption, ("a circle",), objects, torch.zeros(len(words)), 4)

    captioned = [item(1, ["circle", "square"], [top_left, top_left], (circle, square)),  # 1 of 2
                 item(2, ["square"], [bottom_right], (circle, square)),  # 1 of 1
                 item(3, ["a", "circle"], [top_left, top_left], ())]  # no boxes
    evaluation = score_split(captioned, split="test", beam_size=1, image_size=(64, 64),
                             word_labels={"circle": "circle", "square": "square"}, metrics=("bleu4", "cider"))
    per_image = evaluation.per_image
    assert per_image.image_ids == (1, 2, 3)
    assert per_image.attention_hits.tolist() == [1, 1, 0] and per_image.object_words.tolist() == [2, 1, 0]
    assert evaluation.localisation.accuracy == pytest.approx(2 / 3)
    alone = localisation([(["square"], torch.stack([bottom_right]), (circle, square))], image_size=(64, 64),
                         word_labels={"square": "square"})
    assert (alone.image_hits, alone.image_words) == ((1,), (1,))


def cider_runs(values: np.ndarray) -> list[ImageScores]:
    """A run per row of per-image CIDEr-D scores (seeds × images), on images 0..N−1."""
    return [ImageScores(tuple(range(values.shape[1])), cider=row) for row in values]


def t3_distribution(t: float) -> float:
    """Student's t distribution with 3 degrees of freedom in closed form."""
    x = t / math.sqrt(3)
    return 0.5 + (x / (1 + x * x) + math.atan(x)) / math.pi


def test_one_seed_each_is_a_t_interval_over_the_images_with_its_hand_computed_p():
    """One seed per group: the per-image differences D = 0.1, 0.2, 0.3, 0.6 on 4 images; d = 0.3, the jackknife's
    variance of a mean is s_D²/N = (0.14/3)/4, √V = 0.108012, ν = N − 1 = 3: the interval 0.3 ± t_{0.975,3} · √V =
    [−0.0437, 0.6437] (a 95% one: t_{0.975}, not t_{0.95}), p = 2 · (1 − F_3(0.3/√V)) = 0.0691 (both tails)."""
    a = np.array([[0.5, 0.7, 0.2, 0.4]])
    test = paired_test(cider_runs(a), cider_runs(a + [0.1, 0.2, 0.3, 0.6]), metric="cider")
    error = math.sqrt(0.14 / 3 / 4)
    assert test.scope == "models" and test.seed_variance is None and test.degrees_of_freedom == 3
    assert test.difference == pytest.approx(0.3) and test.standard_error == pytest.approx(error) == pytest.approx(
        0.108012, abs=1e-6)
    assert (test.low, test.high) == (pytest.approx(0.3 - T_975[3] * error), pytest.approx(0.3 + T_975[3] * error))
    assert (test.low, test.high) == (pytest.approx(-0.0437, abs=1e-4), pytest.approx(0.6437, abs=1e-4))
    assert test.p == pytest.approx(2 * (1 - t3_distribution(0.3 / error)), rel=1e-9) and test.p == pytest.approx(
        0.0691, abs=1e-4)
    assert not test.excludes_zero


def anova(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """The paired test's seed variance, image variance and degrees of freedom for linear scores (seeds × images),
    from the two-way analysis of variance: each group's spread of its runs' means, the spread of the per-image
    difference of the groups' means, and each group's run-by-image interaction mean square."""
    images = a.shape[1]
    seed_terms = [group.mean(1).var(ddof=1) / len(group) for group in (a, b)]
    differences = b.mean(0) - a.mean(0)  # (N,)
    interactions = []
    for group in (a, b):
        residual = group - group.mean(1, keepdims=True) - group.mean(0, keepdims=True) + group.mean()
        interactions.append((residual ** 2).sum() / ((len(group) - 1) * (images - 1)) / (len(group) * images))
    between = max(0.0, differences.var(ddof=1) / images - sum(interactions))
    variance = sum(seed_terms) + between
    degrees = variance ** 2 / (seed_terms[0] ** 2 / (len(a) - 1) + seed_terms[1] ** 2 / (len(b) - 1)
                               + between ** 2 / (images - 1))
    return sum(seed_terms), between, degrees


@pytest.mark.parametrize("recipe_spread", [0.4, 0.0])
def test_with_seeds_the_variance_and_degrees_of_freedom_are_the_analysis_of_variances(recipe_spread):
    """3 seeds against 2 on 50 images, CIDEr-D (linear in the images): the seeds' variance s_A²/3 + s_B²/2, the
    images' I (the jackknife's, net of each run's own noise) and Welch–Satterthwaite's ν equal the two-way analysis
    of variance's, computed independently, whether or not the recipes differ image by image."""
    rng = np.random.default_rng(5)
    difficulty = rng.random(50)
    a = difficulty + rng.normal(0, 0.1, (3, 1)) + rng.normal(0, 0.3, (3, 50))
    b = difficulty + rng.normal(0, recipe_spread, 50) + rng.normal(0, 0.1, (2, 1)) + rng.normal(0, 0.3, (2, 50))
    test = paired_test(cider_runs(a), cider_runs(b), metric="cider")
    seeds, images, degrees = anova(a, b)
    assert test.scope == "recipes" and test.difference == pytest.approx(b.mean() - a.mean())
    assert test.seed_variance == pytest.approx(seeds, rel=1e-9)
    assert test.degrees_of_freedom == pytest.approx(degrees, rel=1e-9)
    assert test.image_variance == pytest.approx(images, rel=1e-9, abs=1e-15)
    assert images > 0 or not recipe_spread
    half_width = t_quantile(degrees) * math.sqrt(seeds + images)
    assert (test.low, test.high) == (pytest.approx(test.difference - half_width),
                                     pytest.approx(test.difference + half_width))
    assert test.p == pytest.approx(2 * (1 - t_distribution(abs(test.difference) / test.standard_error, degrees)))


def test_a_constant_shift_on_every_image_is_found_exactly_with_p_zero():
    """B = A + 0.1 on every image (one seed each, or seeds that agree): no variance, the point 0.1, p = 0."""
    scores = np.random.default_rng(0).random(200)
    for seeds in (1, 3):
        test = paired_test(cider_runs(np.tile(scores, (seeds, 1))), cider_runs(np.tile(scores + 0.1, (seeds, 1))),
                           metric="cider")
        assert test.difference == pytest.approx(0.1) and test.standard_error == pytest.approx(0, abs=1e-12)
        assert test.low == pytest.approx(0.1) and test.high == pytest.approx(0.1) and test.excludes_zero
        assert test.p == 0


def test_identical_groups_show_no_difference():
    seeds = np.random.default_rng(1).random((3, 200))
    test = paired_test(cider_runs(seeds), cider_runs(seeds), metric="cider")
    assert test.difference == 0 and test.low < 0 < test.high and test.p == 1 and test.image_variance == 0
    same = paired_test(cider_runs(seeds[:1]), cider_runs(seeds[:1]), metric="cider")
    assert same.p == 1 and same.low == same.high == 0


def bleu_runs(seeds: int, images: int, rng: np.random.Generator) -> list[ImageScores]:
    runs = []
    for _ in range(seeds):
        guess = rng.integers(1, 10, size=(images, 4))
        counts = BleuCounts(correct=(guess * rng.random((images, 4))).astype(int), guess=guess,
                            hypothesis_length=guess[:, 0], reference_length=rng.integers(3, 12, images))
        runs.append(ImageScores(tuple(range(images)), counts, cider=rng.random(images),
                                attention_hits=rng.integers(0, 3, images), object_words=rng.integers(2, 4, images)))
    return runs


@pytest.mark.parametrize("seed", [0, 1])
def test_each_jackknife_corpus_is_scored_as_pycocoevalcap_scores_it(seed):
    """The BLEU-4 of the split without image i, from the summed counts less image i's, is pycocoevalcap's corpus
    BLEU-4 of those images alone: its precisions and its brevity penalty recomputed on that corpus (the captions
    are shorter than their references, so the penalty is below 1 and moves with i)."""
    candidates, references = random_captions(seed, images=30)
    candidates = {image: " ".join(text.split()[:3]) for image, text in candidates.items()}  # short: BP < 1
    per_image = ImageScores()
    score_captions(candidates, references, metrics=BLEU_AND_CIDER, per_image=per_image)
    stacked, corpus = statistics(per_image, "bleu4")
    without = left_out(stacked[None], corpus)[0]  # (N,)
    hypotheses = {image: [text] for image, text in candidates.items()}
    for i in (0, 7, 29):
        kept = [image for image in per_image.image_ids if image != per_image.image_ids[i]]
        alone, _ = Bleu(4).compute_score({j: references[j] for j in kept}, {j: hypotheses[j] for j in kept},
                                         verbose=0)
        assert without[i] == pytest.approx(alone[3], rel=1e-12, abs=1e-300)
    lengths = stacked.sum(0)[8:]
    assert lengths[0] < lengths[1], "shorter than the references: the brevity penalty counts"


def test_each_jackknife_corpus_of_attention_accuracy_is_its_hits_over_its_words():
    run = bleu_runs(1, 20, np.random.default_rng(6))[0]
    stacked, corpus = statistics(run, "attention_accuracy")
    without = left_out(stacked[None], corpus)[0]
    hits, words = run.attention_hits, run.object_words
    assert without == pytest.approx([(hits.sum() - hits[i]) / (words.sum() - words[i]) for i in range(20)])


def test_a_test_over_200_images_and_five_seeds_is_quick_and_the_runs_order_does_not_matter():
    rng = np.random.default_rng(3)
    a, b = bleu_runs(5, 200, rng), bleu_runs(5, 200, rng)
    for metric in ("bleu4", "cider", "attention_accuracy"):
        start = time.perf_counter()
        test = paired_test(a, b, metric=metric)
        assert time.perf_counter() - start < 0.5, metric
        assert test.low <= test.difference <= test.high and test.scope == "recipes"
    order = rng.permutation(200)
    shuffled = [ImageScores(tuple(int(i) for i in order), BleuCounts(
        run.bleu.correct[order], run.bleu.guess[order], run.bleu.hypothesis_length[order],
        run.bleu.reference_length[order])) for run in a]
    in_order, reordered = paired_test(a, b, metric="bleu4"), paired_test(shuffled, b, metric="bleu4")
    assert (reordered.difference, reordered.low, reordered.high, reordered.p) == pytest.approx(
        (in_order.difference, in_order.low, in_order.high, in_order.p), rel=1e-12)
    with pytest.raises(ValueError, match="same images"):
        paired_test([ImageScores((1, 2), cider=np.zeros(2))], [ImageScores((1, 3), cider=np.zeros(2))],
                    metric="cider")


def test_no_object_word_in_a_run_gives_no_attention_test():
    runs = bleu_runs(2, 10, np.random.default_rng(7))
    silent = ImageScores(runs[0].image_ids, attention_hits=np.zeros(10, int), object_words=np.zeros(10, int))
    assert paired_test([silent, runs[1]], runs, metric="attention_accuracy") is None


TRIALS = 400  # a false-positive rate of 5% reads 5 ± 1.1%, one of 10% 10 ± 1.5%


@pytest.mark.parametrize("metric", ["cider", "attention_accuracy"])
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_the_95_percent_interval_keeps_its_promise_with_few_seeds(seeds, regime, metric):
    """Simulated groups (benchmarks/paired_coverage.py) whose recipes do not differ: the interval excludes zero in
    at most 7% of the trials; whose recipes differ by a known shift: it covers the shift in at least 93%. Seeds or
    images dominating, with 2, 3 and 5 seeds per group."""
    found = coverage(metric=metric, regime=regime, seeds=seeds, trials=TRIALS)
    assert found["false_positives"] <= 0.07 and found["coverage"] >= 0.93, found


def test_one_seed_each_speaks_for_the_two_models_not_for_their_recipes():
    """Two fixed models (seed offsets +0.05 and −0.05, recipes alike) on new test images each trial: the one-seed
    interval covers the models' own difference, −0.1, in about 95% of trials, and so excludes the recipes' 0 often."""
    rng = np.random.default_rng(8)
    offsets = np.array([[0.05], [-0.05]])
    covered = excluded = 0
    for _ in range(TRIALS):
        a, b = simulated_groups(rng, metric="cider", seeds=1, seed_offsets=offsets, **REGIMES["seeds"])
        test = paired_test(a, b, metric="cider")
        covered += test.low <= -0.1 <= test.high
        excluded += test.excludes_zero
    assert test.scope == "models" and covered / TRIALS >= 0.93 and excluded / TRIALS > 0.5
