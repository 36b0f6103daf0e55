"""How sure `caption compare --against` is: the Student-t interval over seeds against a hand computation, the
per-image sufficient statistics against pycocoevalcap's corpus scores (BLEU-4 summed, CIDEr-D averaged, attention
accuracy summed), and the paired hierarchical bootstrap on cases whose answer is known."""

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
from caption.reports.intervals import T_975, paired_bootstrap, seed_interval, t_quantile

BLEU_AND_CIDER = ("bleu1", "bleu2", "bleu3", "bleu4", "cider")


def test_the_t_interval_over_three_seeds_is_the_hand_computed_one():
    """0.80, 0.84, 0.88: mean 0.84, s = 0.04, t_{0.975,2} = 4.303, half-width 4.303 · 0.04 / √3 = 0.0994."""
    found = seed_interval([0.80, 0.84, 0.88])
    assert found.mean == pytest.approx(0.84) and found.seeds == 3
    assert found.half_width == pytest.approx(4.303 * 0.04 / math.sqrt(3)) and found.half_width == pytest.approx(
        0.0994, abs=5e-5)
    assert found.interval == (pytest.approx(0.84 - 0.0994, abs=5e-5), pytest.approx(0.84 + 0.0994, abs=5e-5))


def test_one_seed_has_no_interval_and_a_missing_score_is_left_out():
    assert seed_interval([0.5]).half_width is None and seed_interval([0.5]).interval is None
    two = seed_interval([0.5, float("nan"), 0.7])  # METEOR missing on one seed
    assert two.seeds == 2 and two.half_width == pytest.approx(12.706 * math.sqrt(0.02) / math.sqrt(2))
    assert math.isnan(seed_interval([float("nan")]).mean) and seed_interval([]).seeds == 0


def test_t_quantiles_are_students_up_to_30_then_the_normals():
    assert t_quantile(1) == 12.706 and t_quantile(2) == 4.303 and t_quantile(30) == 2.042 and len(T_975) == 30
    assert t_quantile(31) == t_quantile(1000) == 1.96
    assert all(a > b for a, b in zip(T_975, T_975[1:])), "decreasing towards the normal's"
    with pytest.raises(ValueError):
        t_quantile(0)


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


def test_a_constant_shift_on_every_image_is_found_exactly_with_p_zero():
    """B = A + 0.1 on every image (one seed each, or seeds that agree): every replicate's difference is 0.1."""
    scores = np.random.default_rng(0).random(200)
    for seeds in (1, 3):
        test = paired_bootstrap(cider_runs(np.tile(scores, (seeds, 1))), cider_runs(np.tile(scores + 0.1, (seeds, 1))),
                                metric="cider", replicates=500)
        assert test.difference == pytest.approx(0.1) and test.bootstrap_mean == pytest.approx(0.1)
        assert test.low == pytest.approx(0.1) and test.high == pytest.approx(0.1) and test.high - test.low < 1e-12
        assert test.p == 0 and test.excludes_zero and test.replicates == 500


def test_identical_groups_show_no_difference():
    rng = np.random.default_rng(1)
    seeds = rng.random((3, 200))
    test = paired_bootstrap(cider_runs(seeds), cider_runs(seeds), metric="cider")
    assert test.low < 0 < test.high and not test.excludes_zero and test.p > 0.5
    same = paired_bootstrap(cider_runs(seeds[:1]), cider_runs(seeds[:1]), metric="cider")
    assert same.p == 1 and same.low == same.high == 0, "every replicate's difference is 0: p capped at 1"


def test_the_bootstraps_mean_is_the_plain_difference_of_means_and_it_is_seeded():
    """CIDEr-D's corpus score is linear in the images: the replicates' mean difference is the difference of the
    groups' means, up to the bootstrap's noise; the same seed gives the same test."""
    rng = np.random.default_rng(2)
    a, b = rng.random((3, 200)), rng.random((4, 200)) + 0.05
    test = paired_bootstrap(cider_runs(a), cider_runs(b), metric="cider", replicates=2000)
    assert test.difference == pytest.approx(b.mean() - a.mean())
    assert test.bootstrap_mean == pytest.approx(b.mean() - a.mean(), abs=0.005)
    assert test.low < test.difference < test.high
    assert paired_bootstrap(cider_runs(a), cider_runs(b), metric="cider") == test
    assert paired_bootstrap(cider_runs(a), cider_runs(b), metric="cider", seed=1) != test


def bleu_runs(seeds: int, images: int, rng: np.random.Generator) -> list[ImageScores]:
    runs = []
    for _ in range(seeds):
        guess = rng.integers(1, 10, size=(images, 4))
        counts = BleuCounts(correct=(guess * rng.random((images, 4))).astype(int), guess=guess,
                            hypothesis_length=guess[:, 0], reference_length=rng.integers(3, 12, images))
        runs.append(ImageScores(tuple(range(images)), counts, cider=rng.random(images),
                                attention_hits=rng.integers(0, 3, images), object_words=rng.integers(2, 4, images)))
    return runs


def test_three_seeds_of_200_images_take_well_under_a_second_per_metric():
    rng = np.random.default_rng(3)
    a, b = bleu_runs(3, 200, rng), bleu_runs(3, 200, rng)
    for metric in ("bleu4", "cider", "attention_accuracy"):
        start = time.perf_counter()
        test = paired_bootstrap(a, b, metric=metric, replicates=2000)
        assert time.perf_counter() - start < 1.0, metric
        assert test.replicates == 2000 and test.low <= test.bootstrap_mean <= test.high


def test_the_bleu_of_a_replicate_is_the_corpus_bleu_of_its_images():
    """One seed each, A's images shuffled in its own order: the difference is corpus BLEU-4 of B minus that of A,
    whatever the order the runs hold their images in."""
    rng = np.random.default_rng(4)
    a, b = bleu_runs(1, 50, rng)[0], bleu_runs(1, 50, rng)[0]
    order = rng.permutation(50)
    shuffled = ImageScores(tuple(int(i) for i in order), BleuCounts(
        a.bleu.correct[order], a.bleu.guess[order], a.bleu.hypothesis_length[order], a.bleu.reference_length[order]))
    expected = corpus_bleu(b.bleu.stacked().sum(0))[3] - corpus_bleu(a.bleu.stacked().sum(0))[3]
    assert paired_bootstrap([shuffled], [b], metric="bleu4").difference == pytest.approx(expected)
    with pytest.raises(ValueError, match="same images"):
        paired_bootstrap([ImageScores((1, 2), cider=np.zeros(2))], [ImageScores((1, 3), cider=np.zeros(2))],
                         metric="cider")
