"""Where each word of a training caption should look, from the image's object boxes: the targets of attention
supervised by boxes (`caption.model.box_supervision`, Liu et al., AAAI 2017, "Attention Correctness in Neural Image
Captioning", with boxes for their weak supervision's object regions).

For a word that names a label of the image's boxes (`caption.data.sources.category_words.named_labels`: "circle" ->
circle, "dogs" -> dog), the target is an (L,) map over the encoder's rows × columns grid laid on the (H, W) input:
the share of each cell's area inside the label's box(es) (exact area overlap; boxes of the label that overlap
count once), normalised to sum 1. Every other word (one naming no label, or a label the image has no box of) has
an all-zero row: no target.

    targets = BoxTargets(word_labels=source.word_labels, grid=(8, 8), image_size=(64, 64))
    target = targets.caption_target(named_labels(words, targets.word_labels), source.input_boxes(record))  # (n+1, L)
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from caption.data.sources.category_words import named_labels
from caption.data.sources.records import Box, ImageRecord, ObjectBox
from caption.errors import ConfigError
from caption.model.vocabulary import tokenize


def cell_coverage(boxes: Sequence[Box], *, grid: tuple[int, int], image_size: tuple[int, int]) -> Tensor:
    """(L,) share of each cell's area inside the union of `boxes` ((x0, y0, x1, y1) in pixels, cut to the image), the
    cells of a rows × columns `grid` over an (H, W) image in row-major order (as the encoder flattens its map), in
    float64, exactly. One box: its overlap with each column times its overlap with each row. Several: the image is
    cut at every cell edge and box edge into rectangles each wholly inside or outside every box and within one cell,
    and each cell sums the area of its rectangles inside a box (overlapping boxes count once). Attention correctness
    (`caption.evaluation.grounding`) weighs α by it; the box targets are it, normalised."""
    (rows, columns), (height, width) = grid, image_size
    cell_area = height * width / (rows * columns)
    column_edges = np.arange(columns + 1) * width / columns  # (columns + 1,)
    row_edges = np.arange(rows + 1) * height / rows  # (rows + 1,)
    corners = np.array(boxes, dtype=np.float64).reshape(-1, 4)  # (N, 4)
    corners[:, 0::2] = corners[:, 0::2].clip(0, width)
    corners[:, 1::2] = corners[:, 1::2].clip(0, height)
    corners = corners[(corners[:, 2] > corners[:, 0]) & (corners[:, 3] > corners[:, 1])]
    if len(corners) <= 1:
        x0, y0, x1, y1 = corners[0] if len(corners) else (0.0, 0.0, 0.0, 0.0)
        overlap_x = (np.minimum(column_edges[1:], x1) - np.maximum(column_edges[:-1], x0)).clip(min=0)  # (columns,)
        overlap_y = (np.minimum(row_edges[1:], y1) - np.maximum(row_edges[:-1], y0)).clip(min=0)  # (rows,)
        return torch.from_numpy(np.outer(overlap_y, overlap_x).ravel() / cell_area)  # (L,)
    xs = np.unique(np.concatenate([column_edges, corners[:, 0::2].ravel()]))  # (X + 1,) sorted
    ys = np.unique(np.concatenate([row_edges, corners[:, 1::2].ravel()]))  # (Y + 1,) sorted
    middle_x, middle_y = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2  # (X,), (Y,)
    within_x = (corners[:, None, 0] <= middle_x) & (middle_x < corners[:, None, 2])  # (N, X)
    within_y = (corners[:, None, 1] <= middle_y) & (middle_y < corners[:, None, 3])  # (N, Y)
    covered = (within_y[:, :, None] & within_x[:, None, :]).any(0)  # (Y, X)
    area = np.diff(ys)[:, None] * np.diff(xs)[None, :] * covered  # (Y, X)
    column = np.minimum((middle_x * columns / width).astype(np.int64), columns - 1)  # (X,)
    row = np.minimum((middle_y * rows / height).astype(np.int64), rows - 1)  # (Y,)
    cell = row[:, None] * columns + column[None, :]  # (Y, X)
    inside = np.bincount(cell.ravel(), weights=area.ravel(), minlength=rows * columns)  # (L,)
    return torch.from_numpy(inside / cell_area)


@dataclass(frozen=True)
class BoxTargets:
    """What makes a training caption's target maps: which words name which label, and the grid over the image.

    Args:
        word_labels: caption word (or two-word phrase) -> label of the boxes (`CaptionSource.word_labels`).
        grid: (rows, columns) of the encoder's attention grid, L = rows · columns.
        image_size: (H, W) of the encoder input, the frame of the boxes (`CaptionSource.input_boxes`).
    """

    word_labels: Mapping[str, str]
    grid: tuple[int, int]
    image_size: tuple[int, int]

    @property
    def locations(self) -> int:
        return self.grid[0] * self.grid[1]

    def label_map(self, boxes: Sequence[ObjectBox], label: str) -> Tensor:
        """(L,) the cells' shares inside the boxes of `label`, normalised to sum 1; all zero when they cover none."""
        named = [box.box for box in boxes if box.label == label]
        share = cell_coverage(named, grid=self.grid, image_size=self.image_size).float()  # (L,)
        total = share.sum()
        return share / total if total > 0 else share

    def caption_target(self, labels: Sequence[str | None], boxes: Sequence[ObjectBox]) -> Tensor:
        """(n+1, L) target of a caption of n words whose labels are `labels` (`named_labels`): row t for word t, the
        last row for <end>; a word naming no label of `boxes` has an all-zero row."""
        present = {box.label for box in boxes}
        maps = {label: self.label_map(boxes, label) for label in set(labels) if label in present}
        target = torch.zeros(len(labels) + 1, self.locations)  # (n+1, L)
        for step, label in enumerate(labels):
            if label in maps:
                target[step] = maps[label]
        return target


def check_supervisable(records: Sequence[ImageRecord], word_labels: Mapping[str, str], *, key: str) -> None:
    """A ConfigError in one line, naming `key` (the weight's setting), when no training caption has a word naming a
    label of its image's boxes: the data has no boxes, or no word map to them, and the supervision no target."""
    boxed = [record for record in records if record.objects]
    if not boxed or not word_labels:
        raise ConfigError(f"{key} supervises attention with object boxes, but the training data has "
                          f"{'no boxes' if not boxed else 'no word -> label map for its boxes'}: set it to 0, or "
                          "give data.source boxes (the built-in shapes, or an instances file)")
    if not any(label is not None and label in {box.label for box in record.objects}
               for record in boxed for reference in record.references
               for label in named_labels(tokenize(reference), word_labels)):
        raise ConfigError(f"{key} supervises attention with object boxes, but no training caption names a label of "
                          "its image's boxes: map the caption words to the labels with data.source.init_args.labels")
