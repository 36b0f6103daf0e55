"""Image files: robust reading, the paper's input transform, and up-front checks.

Every image becomes 8-bit RGB whatever mode Pillow reads it in (grayscale, palette, RGBA, CMYK,
16-bit, float), turned upright by its EXIF orientation, then goes through the transform that
ships with the encoder's torchvision weights (`VGG16_Weights.IMAGENET1K_V1.transforms()`, and the same
preset for the ResNets' IMAGENET1K_V1): resize the short side to 256, centre-crop 224×224, ImageNet
mean/std — the paper's preprocessing (sec. 4.3).

A file that cannot be used raises `BadImageError` with the reason: missing, empty, not an image,
smaller than `min_side`, over Pillow's decompression-bomb limit (`PIL.Image.MAX_IMAGE_PIXELS`,
89.5 megapixels by default), truncated or corrupt. `ImageFileSource.check` finds them before
training, so the data module can stop or leave them out (`data.on_bad_image`).
"""

from __future__ import annotations

import io
import os
import warnings
from abc import abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch.utilities import rank_zero_warn
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor
from torchvision import models
from torchvision.transforms._presets import ImageClassification

from caption.data.records import BadImage, CaptionSource, ImageRecord, ObjectBox
from caption.encoder import TORCHVISION_ENCODERS, imagenet_weights
from caption.errors import CaptionError, CaptionWarning, ConfigError

# The preset of the ImageNet VGG weights (VGG19_Weights.IMAGENET1K_V1 has the same one), also used for
# small_vgg on image files.
WEIGHTS = models.VGG16_Weights.IMAGENET1K_V1
WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")  # more than 8 bits per pixel
ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")
BACKGROUND = (255, 255, 255, 255)  # ours: transparent pixels are shown on white
HINT = (
    "run `caption features` or set data.check_images: decode to find every bad image before training, "
    "and fix them or set data.on_bad_image: skip to leave them out"
)


class BadImageError(CaptionError, ValueError):
    """An image that cannot be used; the message says why (and, from a source, which file and record:
    then `bad` holds them too)."""

    def __init__(self, message: str, bad: BadImage | None = None):
        super().__init__(message)
        self.bad = bad


def _open(path: str | io.BytesIO, *, min_side: int) -> Image.Image:
    """Open `path` (or a file's bytes) lazily (the header only) and check it exists, is an image, and has a sane
    size."""
    if isinstance(path, io.BytesIO):
        if not path.getbuffer().nbytes:
            raise BadImageError("empty file (0 bytes)")
    elif os.path.isdir(path):
        raise BadImageError("a folder, not an image file")
    elif not os.path.isfile(path):
        raise BadImageError("file not found")
    elif os.path.getsize(path) == 0:
        raise BadImageError("empty file (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise BadImageError(f"refused as a possible decompression bomb: {error}") from None
    except UnidentifiedImageError:
        raise BadImageError("not an image file Pillow can read") from None
    except OSError as error:
        raise BadImageError(f"cannot open: {error}") from None
    width, height = image.size
    if min(width, height) < min_side:
        image.close()
        raise BadImageError(f"{width}x{height} pixels, smaller than min_side={min_side}")
    return image


def inspect_image(path: str, *, min_side: int) -> None:
    """Check `path` from its header alone (fast): raises `BadImageError` if it cannot be used."""
    _open(path, min_side=min_side).close()


def _to_8bit(image: Image.Image) -> Image.Image:
    """A 16/32-bit integer or float grayscale image rescaled to 8-bit "L" (not clipped at 255)."""
    pixels = np.asarray(image, dtype=np.float64)  # (H, W)
    finite = np.isfinite(pixels)
    if not finite.all():
        raise BadImageError(f"{pixels.size - int(finite.sum())} of its {pixels.size} pixels are NaN or infinite: "
                            "not an image (check how it was made)")
    peak = float(pixels.max(initial=0.0))
    if image.mode.startswith("I;16"):
        scale = 65535.0
    elif image.mode == "F" and peak <= 1.0:
        scale = 1.0
    else:
        scale = 255.0 if peak <= 255 else 65535.0 if peak <= 65535 else peak
    return Image.fromarray(np.clip(np.rint(pixels / scale * 255.0), 0, 255).astype(np.uint8))


def to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB from any Pillow mode: wide modes rescaled, transparency composited on white."""
    if image.mode in WIDE_MODES:
        image = _to_8bit(image)
    if image.mode in ALPHA_MODES or (image.mode == "P" and "transparency" in image.info):
        image = Image.alpha_composite(Image.new("RGBA", image.size, BACKGROUND), image.convert("RGBA"))
    return image.convert("RGB")


def read_rgb(path: str | io.BytesIO, *, min_side: int) -> Image.Image:
    """Decode `path` (or a file's bytes, e.g. an upload) fully, apply its EXIF orientation and return it as 8-bit RGB.

    Raises `BadImageError` (with the reason) for anything that is not a whole, usable image.
    """
    with _open(path, min_side=min_side) as image:
        try:
            image.load()  # truncated or corrupt data fails here
            upright = ImageOps.exif_transpose(image)
        except (OSError, SyntaxError, ValueError) as error:
            raise BadImageError(f"cannot decode ({error})") from None
    try:
        return to_rgb(upright)
    except (OSError, ValueError) as error:
        raise BadImageError(f"cannot convert mode {upright.mode} to RGB ({error})") from None


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


def list_bad_images(bad: list[BadImage], *, shown: int = 10) -> str:
    """The first `shown` bad images, each with its file, record and reason, in one line."""
    more = f"; and {len(bad) - shown} more" if len(bad) > shown else ""
    return "; ".join(str(image) for image in bad[:shown]) + more


def report_bad_images(bad: list[BadImage], *, total: int, on_bad_image: str) -> None:
    """Stop (on_bad_image "error") or warn (on_bad_image "skip") about `bad`, naming each file and record."""
    if not bad:
        return
    summary = f"{len(bad)} of {total} images cannot be used: {list_bad_images(bad)}"
    if on_bad_image == "error":
        raise BadImageError(f"{summary}. Fix or remove them, or set data.on_bad_image: skip to leave them out")
    rank_zero_warn(f"leaving out {summary} (data.on_bad_image: skip)", category=CaptionWarning)


class ImageFileSource(CaptionSource):
    """A `CaptionSource` whose images are files: robust reading, the encoder weights' transform, up-front checks.

    Subclasses read their annotation files in `read_records` and pass the image settings here.

    Args:
        resize_size: the short side is resized to this (None: the weights' preset, 256).
        crop_size: then centre-cropped to a square of this side (None: the weights' preset, 224).
        min_side: images whose short side is smaller are bad (ours: 32; a 1×1 image is no photo).
    """

    def __init__(self, *, resize_size: int | None, crop_size: int | None, min_side: int):
        if min_side < 1:
            raise ValueError(f"source.min_side must be >= 1, got {min_side}")
        self.resize_size, self.crop_size = resize_size, crop_size
        self.transform = image_transform(resize_size=resize_size, crop_size=crop_size)
        self.min_side = min_side
        self._records: list[ImageRecord] | None = None

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

    def problem(self, record: ImageRecord, *, decode: bool) -> str | None:
        """Why the image of `record` cannot be used, or None if it can."""
        try:
            if decode:
                read_rgb(record.file, min_side=self.min_side)
            else:
                inspect_image(record.file, min_side=self.min_side)
        except BadImageError as error:
            return str(error)
        return None

    def check(self, records: list[ImageRecord], *, decode: bool) -> list[BadImage]:
        # Pillow releases the GIL while reading and decoding, so threads share the work.
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            problems = list(pool.map(lambda record: self.problem(record, decode=decode), records))
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


IMAGE_EXTENSIONS = frozenset(Image.registered_extensions())  # ".jpg", ".png", ... every format Pillow reads


def image_files(inputs: Sequence[str | os.PathLike[str]]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for every input file and every image file in input folders, in order, once each.
    A missing input is a `ConfigError` naming it; a folder without images, a warning."""
    files: dict[Path, bool] = {}
    for path in map(Path, inputs):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
            nested = sorted(p.name for p in path.iterdir() if p.is_dir())
            if nested:
                shown = ", ".join(nested[:5]) + (f" and {len(nested) - 5} more" if len(nested) > 5 else "")
                warnings.warn(f"folder {path}: its {len(nested)} subfolders are not searched ({shown}); "
                              "name each folder of images")
            if not found:
                warnings.warn(f"folder {path} holds no image files")
            for file in found:
                files.setdefault(file.resolve(), False)
        elif path.is_file():
            files[path.resolve()] = True
        else:
            raise ConfigError(f"{path}: no such image file or folder")
    return list(files.items())
