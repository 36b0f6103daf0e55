"""The generic per-image record shared by every dataset of the package, its object boxes, and an unreadable image
(the interface of a source of them: `caption.data.sources.base.CaptionSource`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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

