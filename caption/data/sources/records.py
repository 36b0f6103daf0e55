"""The generic per-image record shared by every dataset of the package, its object boxes, and the source interface."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PIL import Image
from torch import Tensor

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels, x0/y0 inclusive, x1/y1 exclusive


@dataclass(frozen=True)
class ObjectBox:
    """What a caption word can name, and where it is: a label (e.g. "dog", "circle") and its box.

    Labels are the data's own names (COCO's category names, the built-in data's shape kinds); which caption
    words name which label is the source's `CaptionSource.word_labels`.
    """

    label: str
    box: Box

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"label": self.label, "box": list(self.box)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ObjectBox:
        """Inverse of :meth:`to_dict`."""
        x0, y0, x1, y1 = data["box"]
        return cls(label=str(data["label"]), box=(x0, y0, x1, y1))

    def plain(self) -> ObjectBox:
        """The label and box alone (of a subclass that describes more, e.g. the built-in data's shapes)."""
        return ObjectBox(label=self.label, box=self.box)


@dataclass(frozen=True)
class ImageRecord:
    """One image and its reference captions, whatever the dataset."""

    image_id: int  # unique across all splits of a dataset
    split: str  # "train" | "val" | "test"
    references: tuple[str, ...]  # raw (untokenised) reference captions
    file: str | None = None  # image path for on-disk datasets; None for in-memory images
    objects: tuple[ObjectBox, ...] = ()  # what the captions can name, with boxes; () when the data has none
    frame: tuple[int, int] | None = None  # (width, height) of the pixels the boxes are in (the image file's);
    # None: the boxes are in the encoder input's frame already (the built-in data). `CaptionSource.input_boxes`.

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "image_id": self.image_id,
            "split": self.split,
            "references": list(self.references),
            "file": self.file,
            "objects": [obj.to_dict() for obj in self.objects],
        } | ({} if self.frame is None else {"frame": list(self.frame)})

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, read_object: Callable[[dict[str, Any]], ObjectBox] = ObjectBox.from_dict
    ) -> ImageRecord:
        """Inverse of :meth:`to_dict` (`read_object`: of each object's `to_dict`); ``file``, ``objects`` and
        ``frame`` may be absent."""
        frame = data.get("frame")
        return cls(
            image_id=int(data["image_id"]),
            split=str(data["split"]),
            references=tuple(str(ref) for ref in data["references"]),
            file=data.get("file"),
            objects=tuple(read_object(obj) for obj in data.get("objects", ())),
            frame=None if frame is None else (int(frame[0]), int(frame[1])),
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
    typed arguments: `caption.data.synthetic.shapes.ShapesSource` for the built-in data,
    `caption.data.sources.karpathy.KarpathySource` and `caption.data.sources.karpathy.CocoSource` for image files.
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

    @property
    def word_labels(self) -> dict[str, str]:
        """Caption word (or two-word phrase) -> the label of the boxes it names (`ImageRecord.objects`), for
        attention accuracy; empty for data without boxes."""
        return {}

    def input_boxes(self, record: ImageRecord) -> tuple[ObjectBox, ...]:
        """The boxes of `record` in the frame of the encoder input that `image` gives (H, W = `image_size`).

        Here: boxes given in that frame already (`record.frame` None). Sources of image files map boxes given in
        the file's pixels through their resize and crop."""
        if record.frame is not None:
            raise NotImplementedError(f"{type(self).__name__} cannot map boxes from the pixels of an image file")
        return tuple(obj.plain() for obj in record.objects)

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
