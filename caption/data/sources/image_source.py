"""Image files as a caption source: the paper's input transform, its box mapping, and up-front checks.

`ImageFileSource` is the base of the sources whose images are files (read with
`caption.data.sources.image_files.read_rgb`). Each image goes through the transform that ships with the encoder's
torchvision weights (`VGG16_Weights.IMAGENET1K_V1.transforms()`, and the same preset for the ResNets' IMAGENET1K_V1):
resize the short side to 256, centre-crop 224×224, ImageNet mean/std — the paper's preprocessing (sec. 4.3);
`boxes_in_input` maps a record's object boxes into that crop. `ImageFileSource.check` finds the bad images before
training, so the data module can stop or leave them out (`data.on_bad_image`).
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from PIL import Image
from torch import Tensor
from torchvision import models

from caption.data.sources.base import CaptionSource
from caption.data.sources.image_files import BadImageError, image_size, read_rgb
from caption.data.sources.records import BadImage, ImageRecord, ObjectBox
from caption.model.encoder import TORCHVISION_ENCODERS, imagenet_weights

# The preset of the ImageNet VGG weights (VGG19_Weights.IMAGENET1K_V1 has the same one), also used for
# small_vgg on image files.
WEIGHTS = models.VGG16_Weights.IMAGENET1K_V1
ImageClassification = type(WEIGHTS.transforms())  # torchvision's ImageNet preset, named through its weights
Item = TypeVar("Item")
Result = TypeVar("Result")
HINT = (
    "run `caption features` or set data.check_images: decode to find every bad image before training, "
    "and fix them or set data.on_bad_image: skip to leave them out"
)


def image_transform(
    *, resize_size: int | None = None, crop_size: int | None = None, encoder: str = "vgg16"
) -> ImageClassification:
    """The preset of `encoder`'s ImageNet weights (small_vgg: VGG16's), optionally with other sizes (e.g. small
    images in tests)."""
    sizes = {name: size for name, size in (("resize_size", resize_size), ("crop_size", crop_size)) if size is not None}
    weights = imagenet_weights(encoder) if encoder in TORCHVISION_ENCODERS else WEIGHTS
    return weights.transforms(**sizes)


def describe_transform(transform: ImageClassification) -> dict[str, Any]:
    """Every setting of the transform, as plain JSON (stored in the feature cache's manifest)."""
    return {
        "resize_size": list(transform.resize_size),
        "crop_size": list(transform.crop_size),
        "mean": list(transform.mean),
        "std": list(transform.std),
        "interpolation": transform.interpolation.value,
        "antialias": transform.antialias,
    }


def crop_offset(size: int, crop: int) -> int:
    """Where torchvision's `center_crop` starts along one side of `size` pixels: round((size - crop) / 2), or,
    when the crop is larger, minus the padding it adds before (`(crop - size) // 2`)."""
    return round((size - crop) / 2) if size >= crop else -((crop - size) // 2)


def boxes_in_input(
    boxes: tuple[ObjectBox, ...], *, frame: tuple[int, int], transform: ImageClassification
) -> tuple[ObjectBox, ...]:
    """`boxes`, given in the pixels of a (width, height) `frame` image, in the frame of the encoder input that
    `transform` makes of it: the short side resized to `resize_size` (the long side to int(resize · long / short),
    as torchvision computes it), then centre-cropped to `crop_size`. A box is cut to the crop; one wholly cropped
    away is left out (its object is not in the input)."""
    (resize,), (crop,) = transform.resize_size, transform.crop_size
    width, height = frame
    long = int(resize * max(width, height) / min(width, height))
    new_width, new_height = (resize, long) if width <= height else (long, resize)
    left, top = crop_offset(new_width, crop), crop_offset(new_height, crop)
    scale_x, scale_y = new_width / width, new_height / height
    mapped = []
    for box in boxes:
        x0, y0, x1, y1 = box.box
        x0, x1 = (min(max(x * scale_x - left, 0.0), crop) for x in (x0, x1))
        y0, y1 = (min(max(y * scale_y - top, 0.0), crop) for y in (y0, y1))
        if x1 > x0 and y1 > y0:
            mapped.append(ObjectBox(label=box.label, box=(x0, y0, x1, y1)))
    return tuple(mapped)


def in_threads(work: Callable[[Item], Result], items: list[Item]) -> list[Result]:
    """`work` of each of `items`, in order, on up to 8 threads (Pillow releases the GIL while reading and
    decoding, so threads share the work)."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(work, items))


class ImageFileSource(CaptionSource):
    """A `CaptionSource` whose images are files: robust reading, the encoder weights' transform, up-front checks.

    Subclasses read their annotation files in `read_records` and pass the image settings here.

    Args:
        resize_size: the short side is resized to this (None: the weights' preset, 256).
        crop_size: then centre-cropped to a square of this side (None: the weights' preset, 224).
        min_side: images whose short side is smaller are bad (ours: 32; a 1×1 image is no photo).
    """

    size_arguments = ("resize_size", "crop_size")

    def __init__(self, *, resize_size: int | None, crop_size: int | None, min_side: int):
        if min_side < 1:
            raise ValueError(f"source.min_side must be >= 1, got {min_side}")
        self.resize_size, self.crop_size = resize_size, crop_size
        self.transform = image_transform(resize_size=resize_size, crop_size=crop_size)
        self.min_side = min_side
        self._records: list[ImageRecord] | None = None
        self._headers: dict[str, tuple[int, int] | str] = {}  # file -> its size, or why it cannot be used

    def use_encoder(self, encoder: str) -> None:
        """Transform images with the preset of `encoder`'s weights (the data module passes model.encoder.name)."""
        self.transform = image_transform(resize_size=self.resize_size, crop_size=self.crop_size, encoder=encoder)

    @abstractmethod
    def read_records(self) -> list[ImageRecord]:
        """Parse the annotation files into records (every split); called once."""

    @property
    def image_size(self) -> tuple[int, int]:
        (side,) = self.transform.crop_size  # torchvision's ImageClassification crops a square
        return side, side

    def records(self) -> list[ImageRecord]:
        if self._records is None:
            self._records = self.read_records()
        return self._records

    def image(self, record: ImageRecord) -> Tensor:
        """(3, crop, crop) normalised; raises `BadImageError` naming the file and record."""
        try:
            rgb = read_rgb(record.file, min_side=self.min_side)
        except BadImageError as error:
            bad = BadImage(record.image_id, record.split, record.file, str(error))
            raise BadImageError(f"bad image {bad}; {HINT}", bad) from None
        return self.transform(rgb)

    def header(self, file: str) -> tuple[int, int] | str:
        """The (width, height) of `file` from its header, or why it cannot be used."""
        try:
            return image_size(file, min_side=self.min_side)
        except BadImageError as error:
            return str(error)

    def header_sizes(self, records: list[ImageRecord]) -> dict[str, tuple[int, int] | str]:
        """Image file of each of `records` -> its (width, height) from its header, or why it cannot be used; each
        file's header is read once for the source (the sizes for its boxes, then the header check)."""
        unread = list(dict.fromkeys(record.file for record in records if record.file not in self._headers))
        self._headers.update(zip(unread, in_threads(self.header, unread)))
        return {record.file: self._headers[record.file] for record in records}

    def problem(self, record: ImageRecord, *, decode: bool) -> str | None:
        """Why the image of `record` cannot be used, or None if it can."""
        if not decode:
            found = self._headers.get(record.file) or self.header(record.file)
            return found if isinstance(found, str) else None
        try:
            read_rgb(record.file, min_side=self.min_side)
        except BadImageError as error:
            return str(error)
        return None

    def check(self, records: list[ImageRecord], *, decode: bool) -> list[BadImage]:
        if decode:
            problems = in_threads(lambda record: self.problem(record, decode=True), records)
        else:
            self.header_sizes(records)  # each header read once (or already, for the boxes), where `problem` finds it
            problems = [self.problem(record, decode=False) for record in records]
        return [
            BadImage(record.image_id, record.split, record.file, problem)
            for record, problem in zip(records, problems)
            if problem is not None
        ]

    def input_boxes(self, record: ImageRecord) -> tuple[ObjectBox, ...]:
        """The boxes of `record`, given in the pixels of its image file (`record.frame`), resized and cropped as
        the image is (`boxes_in_input`)."""
        if record.frame is None:
            return super().input_boxes(record)
        return boxes_in_input(record.objects, frame=record.frame, transform=self.transform)

    def describe_transform(self) -> dict[str, Any]:
        """The transform's settings (see `describe_transform`)."""
        return describe_transform(self.transform)

    def inference_transform(self) -> Callable[[Image.Image], Tensor]:
        return self.transform

    @property
    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return tuple(self.transform.mean), tuple(self.transform.std)
