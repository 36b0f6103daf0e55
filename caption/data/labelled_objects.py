"""Labelled images for pretraining the encoder as a classifier (`caption pretrain-encoder`): a dataset's object
boxes and their categories (a COCO-format instances file, the built-in data's shapes), or a folder of class folders.

The classifier is the encoder itself with one linear layer on each annotation vector a_i
(`caption.training.encoder_pretraining`), so an object's *crop* is the window its annotations see: the encoder
runs on the whole image at the size the captioner reads it, and each grid cell whose centre lies in an object's
box is labelled with the object's category (the cell holding the box's centre when none does), every other cell
with the background. An annotation then learns to say what lies in its own window, at its own place in the grid
(with `model.encoder.coordinates` its x and y channels keep their meaning), which is what attention looks for.
The one augmentation is a random translation of up to `max_shift` pixels (edges replicated, boxes moved alike):
where an object falls among the cells varies, and no label depends on it. No flip: a mirrored letter or digit
is another class.

    objects = LabelledObjects(source, data.split("train"), categories=object_categories(records), grid=(16, 16),
                              max_shift=4)
    folders = ClassFolders("photos/", transform=source.inference_transform(), image_size=(224, 224))
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from caption.data.sources.image_files import image_files, read_rgb
from caption.data.sources.records import Box, ImageRecord, ObjectBox
from caption.errors import ConfigError

BACKGROUND = 0  # the cells no box holds; category k of `categories` is class k + 1


class LabelledSource(Protocol):
    """What the labelled images come from: a `CaptionSource`, or `ClassFolders`."""

    def image(self, record: ImageRecord) -> Tensor: ...

    def input_boxes(self, record: ImageRecord) -> tuple[ObjectBox, ...]: ...


def object_categories(records: Sequence[ImageRecord]) -> list[str]:
    """The sorted labels of the boxes of `records`; a ConfigError in one line when they have none."""
    categories = sorted({obj.label for record in records for obj in record.objects})
    if not categories:
        raise ConfigError("no labelled objects to pretrain the encoder on: the data has no boxes. Give data.source an "
                          "instances file (COCO format: boxes and categories), or --images a folder of class folders")
    return categories


def cell_labels(boxes: Tensor, labels: Tensor, *, grid: tuple[int, int], image_size: tuple[int, int]) -> Tensor:
    """(L,) class of each cell of a rows × columns grid over an (H, W) image: the label of the smallest box
    (N, 4: x0, y0, x1, y1; x1/y1 exclusive) that holds the cell's centre, else `BACKGROUND`; a box that holds no
    centre labels the cell its own centre falls in. `labels` (N,) are classes (category index + 1)."""
    (rows, columns), (height, width) = grid, image_size
    ys = (torch.arange(rows, dtype=torch.float32) + 0.5) * height / rows  # (rows,)
    xs = (torch.arange(columns, dtype=torch.float32) + 0.5) * width / columns  # (columns,)
    cy, cx = torch.meshgrid(ys, xs, indexing="ij")
    cx, cy = cx.flatten(), cy.flatten()  # (L,) row-major, as the encoder flattens its map
    cells = torch.full((rows * columns,), BACKGROUND, dtype=torch.long)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])  # (N,)
    for index in areas.argsort(descending=True).tolist():  # the largest first: smaller boxes drawn over them
        x0, y0, x1, y1 = boxes[index].tolist()
        inside = (cx >= x0) & (cx < x1) & (cy >= y0) & (cy < y1)  # (L,)
        if not inside.any():  # smaller than a cell: the cell that holds its centre
            row = min(rows - 1, max(0, int((y0 + y1) / 2 * rows / height)))
            column = min(columns - 1, max(0, int((x0 + x1) / 2 * columns / width)))
            inside[row * columns + column] = True
        cells[inside] = labels[index]
    return cells


def shifted(image: Tensor, boxes: Tensor, *, dx: int, dy: int) -> tuple[Tensor, Tensor]:
    """The image (3, H, W) moved right by dx and down by dy pixels (edges replicated), and its boxes with it,
    clipped to the image."""
    _, height, width = image.shape
    pad = max(abs(dx), abs(dy))
    if pad == 0:
        return image, boxes
    padded = F.pad(image[None], (pad, pad, pad, pad), mode="replicate")[0]  # (3, H + 2p, W + 2p)
    moved = padded[:, pad - dy:pad - dy + height, pad - dx:pad - dx + width]  # (3, H, W)
    limits = torch.tensor([width, height, width, height], dtype=boxes.dtype)
    moved_boxes = (boxes + torch.tensor([dx, dy, dx, dy], dtype=boxes.dtype)).clamp(min=torch.zeros(4), max=limits)
    return moved, moved_boxes


class LabelledObjects(Dataset):
    """Each record's image, the class of each of its grid cells, and its objects (which cells, which class).

    Args:
        source: gives each record's image and its boxes in the encoder input's frame.
        records: the images (with objects) to use.
        categories: the labels to tell apart (class k + 1 is categories[k]); objects of other labels are left out.
        grid: (rows, columns) of the encoder's annotation grid on these images.
        max_shift: random translation of up to this many pixels each way (0: none, as for validation).
    """

    def __init__(self, source: LabelledSource, records: Sequence[ImageRecord], *, categories: Sequence[str],
                 grid: tuple[int, int], max_shift: int = 0):
        self.source = source
        self.records = [record for record in records if record.objects]
        self.classes = {label: index + 1 for index, label in enumerate(categories)}
        self.grid = grid
        self.max_shift = max_shift

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        image = self.source.image(record)  # (3, H, W)
        objects = [obj for obj in self.source.input_boxes(record) if obj.label in self.classes]
        boxes = torch.tensor([obj.box for obj in objects], dtype=torch.float32).reshape(-1, 4)  # (N, 4)
        labels = torch.tensor([self.classes[obj.label] for obj in objects], dtype=torch.long)  # (N,)
        if self.max_shift:
            image, boxes = shifted(image, boxes, dx=random.randint(-self.max_shift, self.max_shift),
                                   dy=random.randint(-self.max_shift, self.max_shift))
        size = (image.shape[1], image.shape[2])
        object_cells = torch.stack([cell_labels(box[None], torch.ones(1, dtype=torch.long), grid=self.grid,
                                                image_size=size) > 0 for box in boxes]) if len(boxes) else \
            torch.zeros(0, self.grid[0] * self.grid[1], dtype=torch.bool)  # (N, L): the cells each object labels
        return {"image": image, "cells": cell_labels(boxes, labels, grid=self.grid, image_size=size),
                "object_cells": object_cells, "object_labels": labels}


def collate_objects(items: list[dict[str, Any]]) -> dict[str, Tensor]:
    """Images (B, 3, H, W), cell classes (B, L), and every object of the batch: its image (M,), cells (M, L),
    class (M,)."""
    return {
        "image": torch.stack([item["image"] for item in items]),
        "cells": torch.stack([item["cells"] for item in items]),
        "object_image": torch.cat([torch.full((len(item["object_labels"]),), index, dtype=torch.long)
                                   for index, item in enumerate(items)]),
        "object_cells": torch.cat([item["object_cells"] for item in items]),
        "object_labels": torch.cat([item["object_labels"] for item in items]),
    }


class ClassFolders:
    """A folder of class folders (`root/<class>/*.jpg`, ImageNet's layout) as records whose one object is the whole
    image, labelled with its folder's name. `root/train/<class>` and `root/val/<class>` give the splits where they
    exist; otherwise every `holdout`-th image of each class (in name order) is held out for validation.

    Args:
        root: the folder.
        transform: an RGB image -> the encoder's input (3, H, W) (the captioner's data source's
            `inference_transform`, so the encoder sees what it will see in captioning).
        image_size: (H, W) that `transform` gives.
        holdout: without train/ and val/ folders, one image in this many of each class goes to validation.
    """

    def __init__(self, root: str | Path, *, transform: Callable[[Image.Image], Tensor], image_size: tuple[int, int],
                 holdout: int = 10):
        self.root = Path(root)
        self.transform = transform
        height, width = image_size
        whole: Box = (0.0, 0.0, float(width), float(height))
        if not self.root.is_dir():
            raise ConfigError(f"--images {root}: no such folder "
                              f"(expected a folder of class folders: {root}/<class>/*.jpg)")
        if (self.root / "train").is_dir() and (self.root / "val").is_dir():
            files = [(split, label, path) for split in ("train", "val")
                     for label, path in class_files(self.root / split)]
        else:
            files = [("val" if index % holdout == 0 else "train", label, path)
                     for label, paths in grouped_by_label(class_files(self.root)).items()
                     for index, path in enumerate(paths, start=1)]
        self._records = [ImageRecord(image_id=image_id, split=split, references=(), file=str(path),
                                     objects=(ObjectBox(label, whole),))
                         for image_id, (split, label, path) in enumerate(files)]
        if {record.split for record in self._records} != {"train", "val"}:
            raise ConfigError(f"--images {root}: found {len(files)} images in class folders; it needs at least "
                              f"{holdout} (one held out for validation), or train/ and val/ folders of class folders")

    def split(self, name: str) -> list[ImageRecord]:
        """The records of split `name` ("train" or "val")."""
        return [record for record in self._records if record.split == name]

    def image(self, record: ImageRecord) -> Tensor:
        return self.transform(read_rgb(str(record.file), min_side=1))

    def input_boxes(self, record: ImageRecord) -> tuple[ObjectBox, ...]:
        return record.objects


def class_files(folder: Path) -> list[tuple[str, Path]]:
    """(class, image file) for the images of each class folder `folder/<class>/`, classes and files in name order."""
    labels = sorted(path.name for path in folder.iterdir() if path.is_dir())
    return [(label, path) for label in labels for path, _ in image_files([folder / label])]


def grouped_by_label(files: list[tuple[str, Path]]) -> dict[str, list[Path]]:
    grouped: dict[str, list[Path]] = {}
    for label, path in files:
        grouped.setdefault(label, []).append(path)
    return grouped
