"""What `Captioner` accepts as images, how it names each one in a message, and how it reports those it could not
caption.

An input is a file path, a PIL image, an image file's bytes (`bytes`, `bytearray` or `memoryview`: an upload, a
download), or a tensor in torchvision's layout ((3, H, W) or (1, H, W); uint8, or float in [0, 1]); several are a
sequence of those or a (B, 3, H, W) tensor. Anything else (an int, a bool, a 0-d tensor, None) is a `TypeError`
naming the input, raised before any image is captioned; so is a decoding argument of the wrong type. A file that cannot
be read (missing, a folder, not an image, empty, truncated, a decompression bomb) is a `BadImageError` naming the file:
with `on_error="raise"` (the default) the captions finished before it travel with the error
(`ImageInputError.captions`); with `on_error="skip"` it is left out, warned about, and listed in `Captions.failed`.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import torch
from PIL import Image
from torch import Tensor

from caption.data.sources.image_files import BadImageError
from caption.errors import CaptionError
from caption.model.captions import Caption

ImageInput = str | os.PathLike | Image.Image | Tensor | bytes | bytearray | memoryview
ENCODED = (bytes, bytearray, memoryview)  # an image file's bytes
OnError = Literal["raise", "skip"]
ON_ERROR = ("raise", "skip")


class ImageInputTypeError(CaptionError, TypeError):
    """An input that is not an image: the message names it and its position."""


class ImageInputError(BadImageError):
    """An image that could not be captioned with on_error="raise": the message names it; `index` is its position in
    the inputs and `captions` holds the captions finished before it (None for those not reached)."""

    def __init__(self, message: str, *, index: int, captions: list[Caption | None]):
        super().__init__(message)
        self.index, self.captions = index, captions


class Failure(NamedTuple):
    """An input left out with on_error="skip": its position, how it was given (the file name, or a description),
    and why it could not be captioned."""

    index: int
    item: str
    reason: str


class Captions(list):
    """The captions of several inputs, in their order: a `Caption` each, or None for an input that could not be
    captioned (on_error="skip"), which `failed` lists with the reason."""

    def __init__(self, captions: list[Caption | None], failed: list[Failure]):
        super().__init__(captions)
        self.failed = failed


def describe_input(item: Any) -> str:
    """How an input is named in messages: a path as given, else its kind and size."""
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    if isinstance(item, ENCODED):
        return f"an image file's bytes ({memoryview(item).nbytes} bytes)"
    if isinstance(item, Image.Image):
        return f"a PIL image ({item.mode}, {item.width}x{item.height})"
    if isinstance(item, Tensor):
        return f"a {item.dtype} tensor of shape {tuple(item.shape)}"
    text = repr(item)
    return f"{type(item).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def as_inputs(images: Any) -> tuple[list[Any], bool]:
    """The inputs as a list, and whether several were given (a sequence or a (B, 3, H, W) tensor)."""
    if isinstance(images, Tensor) and images.dim() == 4:
        return list(images), True
    if isinstance(images, Sequence) and not isinstance(images, (str, *ENCODED)):
        return list(images), True
    return [images], False


def check_input(item: Any, index: int) -> None:
    """A TypeError or ValueError naming input `index` if it is not an image `Captioner` can take."""
    where = f"input {index} ({describe_input(item)})"
    if isinstance(item, (str, os.PathLike, Image.Image, *ENCODED)):
        return
    if not isinstance(item, Tensor):
        raise ImageInputTypeError(f"{where}: not an image: give a file path, a PIL image or a tensor (or an image "
                                  "file's bytes)")
    if item.dim() != 3 or item.shape[0] not in (1, 3) or min(item.shape[1:]) < 1:
        raise ValueError(f"{where}: an image tensor is (3, H, W) or (1, H, W), and several are (B, 3, H, W)")
    if not (item.dtype.is_floating_point or item.dtype == torch.uint8):
        raise ImageInputTypeError(f"{where}: an image tensor is uint8 (0..255) or float (0..1)")
    if item.is_floating_point() and not (0 <= item.min() and item.max() <= 1):
        raise ValueError(f"{where}: a float image tensor holds pixels in [0, 1] (use uint8 for 0..255)")


def check_count(name: str, value: Any, *, unset: str) -> None:
    """ValueError for a decoding argument that is neither None (`unset` says what that means) nor an integer >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1 (or None: {unset}), got {value!r}")


def check_num_captions(num_captions: Any) -> None:
    """ValueError for a `num_captions` that is neither None (one caption per image) nor an integer >= 1."""
    check_count("num_captions", num_captions, unset="one caption per image")


def check_decoding_arguments(*, beam_size: Any, max_length: Any, num_captions: Any) -> None:
    """ValueError naming the first of a call's `beam_size`, `max_length` and `num_captions` that is neither None nor
    an integer >= 1 (their bounds, which depend on the model: `caption.model.decoding.check_decoding`)."""
    check_count("beam_size", beam_size, unset="the checkpoint's decoding.beam_size; 1 is greedy")
    check_count("max_length", max_length, unset="the checkpoint's decoding.max_caption_length")
    check_num_captions(num_captions)


def check_call(*, batch_size: Any, on_error: Any, beam_size: Any = None, max_length: Any = None,
               num_captions: Any = None) -> None:
    """ValueError for a `batch_size` that is not an integer >= 1, an unknown `on_error` or a bad decoding argument."""
    check_decoding_arguments(beam_size=beam_size, max_length=max_length, num_captions=num_captions)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {on_error!r}")


def kept(captions: list[Caption | None]) -> str:
    """What the error of an unreadable input says about the captions finished before it."""
    done = sum(caption is not None for caption in captions)
    finished = f"the {done} captions finished before it are in this error's .captions; " if done else ""
    return f" ({finished}on_error='skip' captions the readable images and lists the others)"
