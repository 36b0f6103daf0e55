"""Image files: reading them robustly, checking them up front, and reporting the bad ones.

Every image becomes 8-bit RGB whatever mode Pillow reads it in (grayscale, palette, RGBA, CMYK,
16-bit, float), turned upright by its EXIF orientation (`read_rgb`). A file that cannot be used raises
`BadImageError` with the reason: missing, empty, not an image, smaller than `min_side`, over Pillow's
decompression-bomb limit (`PIL.Image.MAX_IMAGE_PIXELS`, 89.5 megapixels by default), truncated or corrupt;
`inspect_image` checks a file from its header alone (`image_size`: and gives its size), `report_bad_images` stops or
warns about the bad ones naming each file and record, and `image_files` lists the image files of the paths a command
is given.
"""

from __future__ import annotations

import io
import os
import struct
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from lightning.pytorch.utilities import rank_zero_warn
from PIL import Image, ImageOps, UnidentifiedImageError

from caption.data.sources.records import BadImage
from caption.errors import CaptionError, CaptionWarning, ConfigError
from caption.io.outputs import readable_name

WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")  # more than 8 bits per pixel
ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")
BACKGROUND = (255, 255, 255, 255)  # ours: transparent pixels are shown on white
# what Pillow's format plugins raise on a malformed file, besides OSError (Image.open catches some of them only
# while it guesses the format)
MALFORMED = (ValueError, SyntaxError, EOFError, IndexError, TypeError, KeyError, struct.error, ZeroDivisionError,
             OverflowError, NotImplementedError)


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
    except MALFORMED as error:  # e.g. a PNG cut short in its header
        raise BadImageError(f"not an image file Pillow can read ({type(error).__name__}: {error})") from None
    width, height = image.size
    if min(width, height) < min_side:
        image.close()
        raise BadImageError(f"{width}x{height} pixels, smaller than min_side={min_side}")
    return image


def image_size(path: str, *, min_side: int) -> tuple[int, int]:
    """(width, height) of `path` from its header alone (fast; as stored, before any EXIF turn): raises
    `BadImageError` if it cannot be used."""
    with _open(path, min_side=min_side) as image:
        return image.size


def inspect_image(path: str, *, min_side: int) -> None:
    """Check `path` from its header alone (fast): raises `BadImageError` if it cannot be used."""
    image_size(path, min_side=min_side)


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
        except (OSError, *MALFORMED) as error:
            raise BadImageError(f"cannot decode ({error})") from None
    try:
        return to_rgb(upright)
    except (OSError, *MALFORMED) as error:
        raise BadImageError(f"cannot convert mode {upright.mode} to RGB ({error})") from None


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


IMAGE_EXTENSIONS = frozenset(Image.registered_extensions())  # ".jpg", ".png", ... every format Pillow reads


def image_files(inputs: Sequence[str | os.PathLike[str]], *, required: str | None = None) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for every input file and every image file in input folders, in order, once each.
    A missing input is a `ConfigError` naming it; a folder without images, or with subfolders (not searched), a
    warning. With `required` (the command or setting, for the message), finding no image file at all is one
    `ConfigError` instead, that says all of it, with no warning before it."""
    files: dict[Path, bool] = {}
    notes: list[str] = []  # about folders: warned once the inputs are all listed
    for path in map(Path, inputs):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
            nested = sorted(p.name for p in path.iterdir() if p.is_dir())
            if nested:
                shown = ", ".join(nested[:5]) + (f" and {len(nested) - 5} more" if len(nested) > 5 else "")
                notes.append(f"folder {path}: its {len(nested)} subfolders are not searched ({shown}); "
                             "name each folder of images")
            if not found:
                notes.append(f"folder {path} holds no image files")
            for file in found:
                files.setdefault(file.resolve(), False)
        elif path.is_file():
            files[path.resolve()] = True
        else:
            raise ConfigError(f"{readable_name(path)}: no such image file or folder")
    if required is not None and not files:
        named = ", ".join(readable_name(path) for path in inputs)
        raise ConfigError(f"{required}: {named} holds no image files (of the kinds Pillow reads: .png, .jpg, ...)"
                          + "".join(f"; {note}" for note in notes if "subfolders" in note))
    for note in notes:
        warnings.warn(readable_name(note), CaptionWarning, stacklevel=2)
    return list(files.items())
