"""The generic per-image record shared by every dataset of the package, and the source interface."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image
from torch import Tensor


@dataclass(frozen=True)
class ShapeObject:
    """One ground-truth object of a synthetic scene."""

    kind: str  # "circle" | "square" | "triangle"
    color: str  # colour name, e.g. "red"
    size: str  # "small" | "large"
    box: tuple[int, int, int, int]  # (x0, y0, x1, y1) in pixels, x0/y0 inclusive, x1/y1 exclusive

    @property
    def center(self) -> tuple[float, float]:
        """The (x, y) centre of the box in pixel coordinates."""
        x0, y0, x1, y1 = self.box
        return (x0 + x1) / 2, (y0 + y1) / 2

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"kind": self.kind, "color": self.color, "size": self.size, "box": list(self.box)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShapeObject:
        """Inverse of :meth:`to_dict`."""
        x0, y0, x1, y1 = (int(v) for v in data["box"])
        return cls(kind=str(data["kind"]), color=str(data["color"]), size=str(data["size"]), box=(x0, y0, x1, y1))


def object_for_word(objects: Sequence[ShapeObject], word: str) -> ShapeObject | None:
    """The object whose kind is ``word`` (kinds are unique within an image), or None."""
    return next((obj for obj in objects if obj.kind == word), None)


@dataclass(frozen=True)
class ImageRecord:
    """One image and its reference captions, whatever the dataset."""

    image_id: int  # unique across all splits of a dataset
    split: str  # "train" | "val" | "test"
    references: tuple[str, ...]  # raw (untokenised) reference captions
    file: str | None = None  # image path for on-disk datasets; None for in-memory images
    objects: tuple[ShapeObject, ...] = ()  # ground-truth objects (built-in synthetic data only)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "image_id": self.image_id,
            "split": self.split,
            "references": list(self.references),
            "file": self.file,
            "objects": [obj.to_dict() for obj in self.objects],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageRecord:
        """Inverse of :meth:`to_dict`; ``file`` and ``objects`` may be absent."""
        return cls(
            image_id=int(data["image_id"]),
            split=str(data["split"]),
            references=tuple(str(ref) for ref in data["references"]),
            file=data.get("file"),
            objects=tuple(ShapeObject.from_dict(obj) for obj in data.get("objects", ())),
        )


@dataclass(frozen=True)
class BadImage:
    """An image that cannot be used for training or evaluation, and why."""

    image_id: int  # the record's image id
    split: str  # the record's split
    file: str | None  # the image path, if the image lives on disk
    reason: str  # what is wrong, e.g. "file not found"

    def __str__(self) -> str:
        return f"{self.file} (image {self.image_id}, {self.split}): {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"image_id": self.image_id, "split": self.split, "file": self.file, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BadImage:
        """Inverse of :meth:`to_dict`."""
        return cls(int(data["image_id"]), str(data["split"]), data["file"], str(data["reason"]))


class CaptionSource(ABC):
    """Where a dataset's records and images come from; the data module needs nothing else.

    Subclasses are chosen in a config by class path (`data.source.class_path`), each with its own
    typed arguments: `caption.data.shapes.ShapesSource` for the built-in data,
    `caption.data.karpathy.KarpathySource` and `caption.data.karpathy.CocoSource` for image files.
    """

    # the arguments that name files or folders (a path or a list of paths): the data module records them
    # absolute in the checkpoint, so that a model used from another folder finds its data
    path_arguments: tuple[str, ...] = ()

    @abstractmethod
    def records(self) -> list[ImageRecord]:
        """Every image of every split, with its references."""

    @abstractmethod
    def image(self, record: ImageRecord) -> Tensor:
        """The image of `record` as a normalised float tensor (3, H, W), ready for the encoder."""

    @property
    @abstractmethod
    def image_size(self) -> tuple[int, int]:
        """(H, W) of every tensor `image` returns."""

    def use_encoder(self, encoder: str) -> None:
        """Prepare images for the encoder named `encoder` (model.encoder.name; the data module passes it). Sources of
        image files take the transform of its weights; sources with their own normalisation do nothing."""

    def inference_transform(self) -> Callable[[Image.Image], Tensor]:
        """An RGB image from outside the dataset (any size) -> the encoder's input (3, H, W), prepared as
        `image` prepares the dataset's own: what a model trained on this source needs for new images."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to prepare images from outside the "
                                  "dataset (CaptionSource.inference_transform), so its models cannot caption them")

    @property
    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per-channel (mean, std) in 0..1 pixel units that `image` normalises with (to draw images again)."""
        raise NotImplementedError(f"{type(self).__name__} does not give its pixel normalization")

    def check(self, records: list[ImageRecord], *, decode: bool) -> list[BadImage]:
        """The images of `records` that cannot be read: none for in-memory data.

        Sources of image files override this: `decode=False` reads each file's header only,
        `decode=True` decodes every image (slower, and catches truncated or corrupt data too).
        """
        return []


def absolute_paths(settings: dict[str, Any], path_arguments: tuple[str, ...]) -> dict[str, Any]:
    """A source's settings ({class_path, init_args}) with the paths among its `path_arguments` made absolute
    against the current folder (where the source itself reads them)."""
    def absolute(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [absolute(item) for item in value]
        return os.path.abspath(value) if isinstance(value, (str, os.PathLike)) else value

    init_args = dict(settings.get("init_args") or {})
    init_args.update({key: absolute(init_args[key]) for key in path_arguments if key in init_args})
    return {**settings, "init_args": init_args}
