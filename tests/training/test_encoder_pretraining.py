"""The encoder pretrained as a classifier of labelled objects: each cell's label against hand-drawn grids, the loss
and the object predictions against hand computation, the translation moving boxes with pixels."""

import math

import pytest
import torch

from caption.data.labelled_objects import BACKGROUND, cell_labels, object_categories, shifted
from caption.data.sources.records import ImageRecord, ObjectBox
from caption.errors import ConfigError
from caption.training.encoder_pretraining import cell_loss, confusion_table, object_predictions


def test_cells_take_the_label_of_the_smallest_box_holding_their_centre():
    # a 4x4 grid over an 8x8 image: cell centres at 1, 3, 5, 7 on each axis
    boxes = torch.tensor([[0.0, 0.0, 8.0, 4.0],   # the top half: rows 0-1, class 1
                          [2.0, 0.0, 4.0, 2.0],   # holds the centre (3, 1) only: cell 1, class 2
                          [6.2, 6.2, 6.8, 6.8]])  # holds no centre; its own (6.5, 6.5) lies in cell (3, 3): class 3
    cells = cell_labels(boxes, torch.tensor([1, 2, 3]), grid=(4, 4), image_size=(8, 8))
    expected = torch.tensor([1, 2, 1, 1,
                             1, 1, 1, 1,
                             0, 0, 0, 0,
                             0, 0, 0, 3])
    assert torch.equal(cells, expected)
    assert BACKGROUND == 0
    # x1/y1 exclusive: a box ending at a centre does not hold it
    assert cell_labels(torch.tensor([[0.0, 0.0, 3.0, 3.0]]), torch.tensor([1]), grid=(4, 4),
                       image_size=(8, 8)).tolist() == [1] + [0] * 15


def test_a_grid_that_is_not_square_follows_the_image():
    # 2 rows x 4 columns over a 4 (H) x 8 (W) image: centres x = 1, 3, 5, 7 and y = 1, 3
    cells = cell_labels(torch.tensor([[4.0, 2.0, 8.0, 4.0]]), torch.tensor([5]), grid=(2, 4), image_size=(4, 8))
    assert cells.tolist() == [0, 0, 0, 0, 0, 0, 5, 5]


def test_the_loss_is_the_mean_over_object_cells_plus_the_weighted_mean_over_background_cells():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]]])  # (1, 4, 3)
    cells = torch.tensor([[0, 1, 2, 0]])

    def ce(row, target):
        return -(row[target] - math.log(sum(math.exp(v) for v in row)))

    rows = logits[0].tolist()
    objects = (ce(rows[1], 1) + ce(rows[2], 2)) / 2
    background = (ce(rows[0], 0) + ce(rows[3], 0)) / 2
    assert cell_loss(logits, cells, background_weight=0.5).item() == pytest.approx(objects + 0.5 * background)
    assert cell_loss(logits, cells, background_weight=0.0).item() == pytest.approx(objects)
    # a whole-image label (a class folder) has no background cells
    assert cell_loss(logits, torch.tensor([[1, 1, 1, 1]]), background_weight=1.0).item() == pytest.approx(
        sum(ce(row, 1) for row in rows) / 4)


def test_an_object_is_the_argmax_of_its_cells_mean_scores_without_the_background():
    logits = torch.tensor([[[9.0, 1.0, 0.0], [9.0, 0.0, 3.0], [0.0, 5.0, 0.0]],
                           [[0.0, 0.0, 1.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]]])  # (2 images, 3 cells, 3 classes)
    object_cells = torch.tensor([[True, True, False],    # image 0: mean (9, 0.5, 1.5) -> class 2, not the background
                                 [False, False, True],   # image 0: class 1
                                 [True, True, False]])   # image 1: mean (0, 1, 0.5) -> class 1
    predicted = object_predictions(logits, object_image=torch.tensor([0, 0, 1]), object_cells=object_cells)
    assert predicted.tolist() == [2, 1, 1]


def test_a_shift_moves_the_boxes_with_the_pixels_and_replicates_the_edges():
    image = torch.arange(16.0).reshape(1, 4, 4).expand(3, 4, 4)
    moved, boxes = shifted(image, torch.tensor([[1.0, 1.0, 3.0, 3.0]]), dx=1, dy=-1)
    assert torch.equal(moved[0, 0], torch.tensor([4.0, 4.0, 5.0, 6.0]))  # row 1 moved up, its left edge repeated
    assert torch.equal(moved[0, 3], torch.tensor([12.0, 12.0, 13.0, 14.0]))  # the bottom row repeated
    assert boxes.tolist() == [[2.0, 0.0, 4.0, 2.0]]
    assert moved[0, 0, 2] == image[0, 1, 1]  # the pixel at the box's corner moved with the box
    _, clipped = shifted(image, torch.tensor([[0.0, 0.0, 2.0, 2.0]]), dx=-1, dy=0)
    assert clipped.tolist() == [[0.0, 0.0, 1.0, 2.0]]


def test_data_without_boxes_is_refused_in_one_line():
    records = [ImageRecord(1, "train", ("a cat",)), ImageRecord(2, "train", ("a dog",))]
    with pytest.raises(ConfigError) as refused:
        object_categories(records)
    assert "instances file" in str(refused.value) and "--images" in str(refused.value)
    assert "\n" not in str(refused.value)
    boxed = [ImageRecord(1, "train", ("a cat",),
                         objects=(ObjectBox("dog", (0, 0, 1, 1)), ObjectBox("cat", (0, 0, 1, 1))))]
    assert object_categories(boxed) == ["cat", "dog"]


def test_the_confusion_table_has_a_row_per_category_and_its_accuracy():
    table = confusion_table([[3, 1], [0, 4]], ["cat", "dog"])
    lines = table.splitlines()
    assert lines[0].split() == ["cat", "dog", "accuracy"]
    assert lines[1].split() == ["cat", "3", "1", "0.750"] and lines[2].split() == ["dog", "0", "4", "1.000"]
