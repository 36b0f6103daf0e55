"""The targets of attention supervised by boxes: each cell's share inside a label's boxes, by hand and against pixel
counting, per caption word, through the training dataset and its batches; data that cannot give any is refused."""

import itertools
from dataclasses import replace

import pytest
import torch

from caption.data.box_targets import BoxTargets, check_supervisable, cell_coverage
from caption.data.collate import collate
from caption.data.datasets import CaptionPairs
from caption.data.sources.records import ObjectBox
from caption.data.synthetic.shapes import ShapesSource
from caption.errors import ConfigError
from caption.model.vocabulary import Vocabulary, tokenize

WORDS = {"circle": "circle", "circles": "circle", "square": "square", "squares": "square"}


def test_cell_coverage_matches_pixel_counting_on_every_box_and_many_pairs():
    """Every whole-pixel box of a 6×4 image (H 4, W 6) under a 2×3 grid, and every pair of every fifth of them: the
    share equals the count of covered pixels in each cell over the cell's 4 pixels."""
    height, width, grid = 4, 6, (2, 3)
    spans_x = [(a, b) for a, b in itertools.combinations(range(width + 1), 2)]
    spans_y = [(a, b) for a, b in itertools.combinations(range(height + 1), 2)]
    boxes = [(x0, y0, x1, y1) for x0, x1 in spans_x for y0, y1 in spans_y]
    checked = 0
    for first, second in [(box, box) for box in boxes] + list(itertools.combinations(boxes[::5], 2)):
        pixels = torch.zeros(height, width)
        for x0, y0, x1, y1 in (first, second):
            pixels[y0:y1, x0:x1] = 1
        counted = pixels.reshape(2, 2, 3, 2).sum(dim=(1, 3)).flatten() / 4  # (L,): covered pixels per cell
        share = cell_coverage([first, second], grid=grid, image_size=(height, width)).float()
        torch.testing.assert_close(share, counted)
        checked += 1
    assert checked == 210 + 42 * 41 // 2


def test_a_caption_target_by_hand_on_a_2x2_grid():
    targets = BoxTargets(word_labels=WORDS, grid=(2, 2), image_size=(4, 4))
    boxes = [ObjectBox("circle", (0.0, 0.0, 3.0, 2.0)), ObjectBox("square", (0.0, 2.0, 2.0, 4.0)),
             ObjectBox("square", (2.0, 3.0, 4.0, 4.0))]
    words = tokenize("a circle above two squares and a triangle")
    labels = [WORDS.get(word) for word in words]
    labels[words.index("triangle")] = "triangle"  # a label the image has no box of: no target
    target = targets.caption_target(labels, boxes)
    assert target.shape == (len(words) + 1, 4)  # the words and <end>
    expected = torch.zeros(len(words) + 1, 4)
    expected[1] = torch.tensor([1.0, 0.5, 0.0, 0.0]) / 1.5  # "circle": the top left cell and half the top right
    expected[4] = torch.tensor([0.0, 0.0, 1.0, 0.5]) / 1.5  # "squares": both squares' boxes
    torch.testing.assert_close(target, expected)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> ShapesSource:
    return ShapesSource(root=str(tmp_path_factory.mktemp("shapes")), num_train=4, num_val=2, num_test=2)


def test_training_items_and_batches_carry_targets_aligned_with_the_caption_only_when_asked(shapes):
    records = [record for record in shapes.records() if record.split == "train"]
    vocabulary = Vocabulary.build((tokenize(ref) for record in records for ref in record.references), min_count=1)
    plain = CaptionPairs(shapes, records, vocabulary, max_length=50)
    assert "box_target" not in plain[0] and "box_target" not in collate([plain[0], plain[1]])
    targets = BoxTargets(word_labels=shapes.word_labels, grid=(8, 8), image_size=tuple(shapes.image_size))
    supervised = CaptionPairs(shapes, records, vocabulary, max_length=50, box_targets=targets)
    for index in range(len(supervised)):
        item = supervised[index]
        record = records[supervised.items[index][0]]
        words = [vocabulary.itos[index] for index in item["caption"][1:].tolist()]  # the words, then <end>
        assert item["box_target"].shape == (len(item["caption"]) - 1, 64)  # one row per predicted token
        for word, row in zip(words, item["box_target"]):
            label = shapes.word_labels.get(word)
            if label is None:
                assert row.sum() == 0, word
                continue
            assert row.sum().item() == pytest.approx(1.0)
            box = next(obj.box for obj in record.objects if obj.label == label)  # one object per kind
            assert row.tolist() == pytest.approx(targets.label_map([ObjectBox(label, box)], label).tolist())
    batch = collate([supervised[index] for index in range(6)])
    assert batch["box_target"].shape[:2] == batch["caption"][:, 1:].shape  # (B, T, L) as α
    padding = batch["caption"][:, 1:] == Vocabulary.PAD
    assert batch["box_target"][padding].sum() == 0


def test_data_without_boxes_or_without_a_word_naming_them_is_refused_naming_the_weight(shapes):
    records = [record for record in shapes.records() if record.split == "train"]
    unboxed = [replace(record, objects=()) for record in records]
    with pytest.raises(ConfigError, match=r"model\.hard\.box_supervision .* no boxes") as error:
        check_supervisable(unboxed, shapes.word_labels, key="model.hard.box_supervision")
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"model\.soft\.box_supervision .* no word -> label map"):
        check_supervisable(records, {}, key="model.soft.box_supervision")
    with pytest.raises(ConfigError, match="no training caption names a label"):
        check_supervisable(records, {"dog": "dog"}, key="model.soft.box_supervision")
    check_supervisable(records, shapes.word_labels, key="model.soft.box_supervision")  # the shapes: accepted
