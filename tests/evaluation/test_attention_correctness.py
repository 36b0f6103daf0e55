"""Attention correctness (Liu et al., AAAI 2017): the α mass inside the named object's boxes, each cell weighed by
the exact share of its area inside them, and its chance level, the mass of uniform α; both, with CHAIR, in the
evaluation's table and metrics.json."""

import json
import math
import random
import re

import pytest
import torch

from caption.data.sources.records import ObjectBox
from caption.data.box_targets import cell_coverage
from caption.evaluation.grid import attention_grid
from caption.evaluation.grounding import CaptionAttention, localisation
from caption.evaluation.hallucination import hallucination
from caption.evaluation.report import Evaluation

KINDS = {kind: kind for kind in ("circle", "square", "triangle")}  # each names itself


def test_a_box_over_one_cell_and_half_of_another_holds_their_mass_by_hand():
    """2x2 grid on 64x64 (cells of 32x32); the box (0, 0, 48, 32) covers cell 0 and the left half of cell 1."""
    assert cell_coverage([(0, 0, 48, 32)], grid=(2, 2), image_size=(64, 64)).tolist() == [1.0, 0.5, 0.0, 0.0]
    alpha = torch.tensor([[0.1, 0.4, 0.2, 0.3]])  # (T=1, L=4)
    found = localisation([(["circle"], alpha, (ObjectBox("circle", (0, 0, 48, 32)),))], image_size=(64, 64),
                         word_labels=KINDS)
    assert found.correctness == pytest.approx(0.1 * 1 + 0.4 * 0.5)
    assert found.chance_correctness == pytest.approx(48 * 32 / (64 * 64))  # the box's share of the image
    assert found.accuracy == 0, "its peak (cell 1, centre (48, 16)) is on the box's exclusive edge"


def test_overlapping_boxes_count_once_and_boxes_are_cut_to_the_image():
    # cell 0 (x, y in 0..32): the two boxes cover 0..16 x 0..32 and 8..24 x 0..16, together 16*32 + 8*16 of 32*32
    coverage = cell_coverage([(0, 0, 16, 32), (8, 0, 24, 16)], grid=(2, 2), image_size=(64, 64))
    assert coverage.tolist() == [(16 * 32 + 8 * 16) / (32 * 32), 0.0, 0.0, 0.0]
    assert cell_coverage([(-10, -10, 100, 100)], grid=(2, 2), image_size=(64, 64)).tolist() == [1.0] * 4
    outside = cell_coverage([(70, 0, 90, 10)], grid=(2, 2), image_size=(64, 64))
    assert outside.tolist() == [0.0] * 4, "wholly outside: nothing"
    assert cell_coverage([], grid=(2, 2), image_size=(64, 64)).tolist() == [0.0] * 4


def rasterised(boxes: list[tuple[float, float, float, float]], locations: int, image_size: tuple[int, int],
               step: float) -> list[float]:
    """Each cell's share inside the boxes by counting sub-pixels of side `step` whose centre lies in a box: exact
    when every box edge and cell edge is a multiple of `step`."""
    height, width = image_size
    rows, columns = attention_grid(locations, image_size)
    counts, totals = [0] * locations, [0] * locations
    for j in range(round(height / step)):
        for i in range(round(width / step)):
            x, y = (i + 0.5) * step, (j + 0.5) * step
            cell = int(y * rows / height) * columns + int(x * columns / width)
            totals[cell] += 1
            counts[cell] += any(x0 <= x < x1 and y0 <= y < y1 for x0, y0, x1, y1 in boxes)
    return [count / total for count, total in zip(counts, totals)]


@pytest.mark.parametrize(("locations", "image_size"), [(4, (16, 16)), (8, (16, 32)), (9, (24, 24))])
def test_cell_coverage_equals_counting_sub_pixels(locations, image_size):
    rng = random.Random(locations)
    height, width = image_size
    for _ in range(20):
        boxes = []
        for _ in range(rng.randint(1, 3)):  # edges on a half-pixel lattice, some past the image
            x0, x1 = sorted(rng.randint(-2, 2 * width + 2) / 2 for _ in range(2))
            y0, y1 = sorted(rng.randint(-2, 2 * height + 2) / 2 for _ in range(2))
            boxes.append((x0, y0, x1, y1))
        expected = rasterised(boxes, locations, image_size, step=0.5)
        coverage = cell_coverage(boxes, grid=attention_grid(locations, image_size), image_size=image_size)
        assert coverage.tolist() == pytest.approx(expected, abs=1e-12), boxes


def test_the_chance_level_is_the_mass_uniform_attention_puts_on_the_named_boxes():
    rng = random.Random(0)
    images = []
    for _ in range(6):
        boxes = tuple(ObjectBox(rng.choice(list(KINDS)), (rng.uniform(0, 40), rng.uniform(0, 40),
                                                         rng.uniform(40, 64), rng.uniform(40, 64))) for _ in range(2))
        words = [rng.choice([*KINDS, "a", "red"]) for _ in range(5)]
        images.append((words, boxes))
    uniform = localisation([(words, torch.full((5, 16), 1 / 16), boxes) for words, boxes in images],
                           image_size=(64, 64), word_labels=KINDS)
    assert uniform.correctness == pytest.approx(uniform.chance_correctness, abs=1e-12)
    for label in uniform.by_label.values():
        assert label.correctness == pytest.approx(label.chance_correctness, abs=1e-12) or label.nouns_present == 0
    # and the mean over random α (Dirichlet(1): uniform in expectation) comes close to it
    torch.manual_seed(0)
    sampled = [localisation([(words, torch.distributions.Dirichlet(torch.ones(16)).sample((5,)), boxes)
                             for words, boxes in images], image_size=(64, 64), word_labels=KINDS).correctness
               for _ in range(400)]
    assert sum(sampled) / len(sampled) == pytest.approx(uniform.chance_correctness, abs=0.01)


def test_correctness_averages_over_the_words_whose_object_the_image_holds_and_per_label():
    circle, square = ObjectBox("circle", (0, 0, 32, 32)), ObjectBox("square", (32, 32, 64, 64))  # cells 0 and 3
    alpha = torch.tensor([[0.7, 0.1, 0.1, 0.1],   # "circle": 0.7 inside its box
                          [0.2, 0.2, 0.2, 0.4],   # "square": 0.4
                          [0.9, 0.0, 0.0, 0.1],   # "triangle": the image holds none -> not averaged
                          [0.0, 0.0, 0.0, 1.0]])  # "circle" again, a one-hot on the square (hard attention): 0
    found = localisation([(["circle", "square", "triangle", "circle"], alpha, (circle, square))], image_size=(64, 64),
                         word_labels=KINDS)
    assert found.correctness == pytest.approx((0.7 + 0.4 + 0.0) / 3)
    assert found.chance_correctness == pytest.approx(0.25)
    assert found.scores()["attention_correctness"] == found.correctness
    by_label = found.by_label
    assert (by_label["circle"].nouns_present, by_label["circle"].correctness) == (2, pytest.approx(0.35))
    assert (by_label["square"].nouns_present, by_label["square"].correctness) == (1, pytest.approx(0.4))
    assert by_label["triangle"].nouns == 1 and by_label["triangle"].nouns_present == 0
    assert math.isnan(by_label["triangle"].correctness) and math.isnan(by_label["triangle"].chance_correctness)
    absent = localisation([(["triangle"], alpha[:1], (circle,))], image_size=(64, 64), word_labels=KINDS)
    assert absent.nouns == 1 and math.isnan(absent.correctness) and math.isnan(absent.chance_correctness)


def test_hard_attention_peaks_at_the_location_it_used_and_weighs_its_alpha():
    """The location a word's context used (sampled, with hard_eval_context: sample) is its peak for the accuracy;
    its correctness is still α's mass: the distribution the location was drawn from."""
    circle = ObjectBox("circle", (0, 0, 32, 32))  # cell 0
    alpha = torch.tensor([[0.7, 0.1, 0.1, 0.1]])
    drawn = CaptionAttention(["circle"], alpha, (circle,), locations=torch.tensor([3]))
    found = localisation([drawn], image_size=(64, 64), word_labels=KINDS)
    assert (found.accuracy, found.background) == (0.0, 1.0) and found.correctness == pytest.approx(0.7)
    peaked = localisation([drawn._replace(locations=None)], image_size=(64, 64), word_labels=KINDS)
    assert peaked.accuracy == 1.0 and peaked.correctness == found.correctness


def test_the_table_and_metrics_json_show_correctness_and_chair_beside_attention_accuracy():
    circle, square = ObjectBox("circle", (0, 0, 32, 32)), ObjectBox("square", (32, 32, 64, 64))
    alpha = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.4], [0.9, 0.0, 0.0, 0.1]])
    words = ["circle", "square", "triangle"]
    found = localisation([(words, alpha, (circle, square))], image_size=(64, 64), word_labels=KINDS)
    named = hallucination([(words, {"circle", "square"})], word_labels=KINDS)
    evaluation = Evaluation("test", 3, {"bleu4": 0.5}, {}, found, 1.2, hallucination=named)
    table = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in evaluation.table().splitlines()[1:]
                 if re.search(r"\S\s{2,}\S", line))  # name -> value
    assert table["attention correctness"] == "55.0 (2 object words of objects in their image)"
    assert table["uniform α's correctness"] == "25.0"
    assert table["CHAIR-i"] == "33.3 (1 of 3 object mentions)" and table["CHAIR-s"] == "100.0 (1 of 1 captions)"
    assert table["circle"] == "100.0 (1 words; random location 25.0; correctness 70.0, uniform α 25.0)"
    assert table["triangle"] == "0.0 (1 words; random location 0.0)", "no correctness: the image holds no triangle"
    written = json.loads(json.dumps(evaluation.metrics(), allow_nan=False))  # JSON has no NaN: null
    assert written["attention_by_label"]["triangle"] == {"nouns": 1, "accuracy": 0.0, "chance_location": 0.0,
                                                         "nouns_present": 0, "correctness": None,
                                                         "chance_correctness": None}
    assert written["attention_by_label"]["circle"]["correctness"] == pytest.approx(0.7)
    assert written["hallucination_by_label"] == {label: {"mentions": 1, "hallucinated": int(label == "triangle"),
                                                         "chair_i": float(label == "triangle")} for label in KINDS}
    assert written["metrics"]["chair_i"] == pytest.approx(1 / 3) and written["metrics"]["chair_s"] == 1.0
    assert written["metrics"]["attention_correctness"] == pytest.approx(0.55)
