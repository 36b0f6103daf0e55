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

import torch
from torch import Tensor

from caption.data.sources.category_words import named_labels
from caption.data.sources.records import ImageRecord, ObjectBox
from caption.errors import ConfigError
from caption.model.vocabulary import tokenize


def covered_share(boxes: Tensor, *, grid: tuple[int, int], image_size: tuple[int, int]) -> Tensor:
    """(L,) share of each cell's area that the union of `boxes` (N, 4: x0, y0, x1, y1 in pixels) covers, the cells of
    a rows × columns grid over an (H, W) image in row-major order (as the encoder flattens its map). Exact: the plane
    is cut at every box and cell edge, and each piece is inside a box or not."""
    (rows, columns), (height, width) = grid, image_size
    boxes = boxes.double()
    cell_xs = torch.linspace(0, width, columns + 1, dtype=torch.float64)  # (columns + 1,)
    cell_ys = torch.linspace(0, height, rows + 1, dtype=torch.float64)  # (rows + 1,)
    xs = torch.cat([cell_xs, boxes[:, [0, 2]].flatten().clamp(0, width)]).unique()  # (X,) sorted
    ys = torch.cat([cell_ys, boxes[:, [1, 3]].flatten().clamp(0, height)]).unique()  # (Y,) sorted
    mid_x, mid_y = (xs[1:] + xs[:-1]) / 2, (ys[1:] + ys[:-1]) / 2  # (X-1,), (Y-1,): each piece's centre
    inside_x = (boxes[:, None, 0] <= mid_x) & (mid_x < boxes[:, None, 2])  # (N, X-1)
    inside_y = (boxes[:, None, 1] <= mid_y) & (mid_y < boxes[:, None, 3])  # (N, Y-1)
    covered = (inside_y[:, :, None] & inside_x[:, None, :]).any(dim=0)  # (Y-1, X-1): the piece is in a box
    area = (ys[1:] - ys[:-1])[:, None] * (xs[1:] - xs[:-1])[None, :]  # (Y-1, X-1)
    row = (torch.bucketize(mid_y, cell_ys) - 1).clamp(0, rows - 1)  # (Y-1,): the cell row holding each piece
    column = (torch.bucketize(mid_x, cell_xs) - 1).clamp(0, columns - 1)  # (X-1,)
    cell = (row[:, None] * columns + column[None, :]).flatten()  # (P,)
    inside = torch.zeros(rows * columns, dtype=torch.float64).index_add_(0, cell, (area * covered).flatten())
    return (inside / (height / rows * width / columns)).float()  # (L,)


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
        named = torch.tensor([box.box for box in boxes if box.label == label], dtype=torch.float32).reshape(-1, 4)
        share = covered_share(named, grid=self.grid, image_size=self.image_size)  # (L,)
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
