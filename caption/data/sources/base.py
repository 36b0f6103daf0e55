"""The interface of every data source (`data.source` in a config): where a dataset's records and images come from.

`CaptionSource` is what a `data.source` read from a config, a checkpoint or an exported folder may name: it is
registered as such with the class-path rule (`caption.io.class_paths.expect_base`), so a class of another kind is
refused before anything is built.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from PIL import Image
from torch import Tensor

from caption.data.sources.records import BadImage, ImageRecord, ObjectBox
from caption.io.class_paths import expect_base


class CaptionSource(ABC):
    """Where a dataset's records and images come from; the data module needs nothing else.

    Subclasses are chosen in a config by class path (`data.source.class_path`), each with its own
    typed arguments: `caption.data.synthetic.shapes.ShapesSource` for the built-in data,
    `caption.data.sources.karpathy.KarpathySource` and `caption.data.sources.karpathy.CocoSource` for image files.
    """

    # the arguments that name files or folders (a path or a list of paths): the data module records them
    # absolute in the checkpoint, so that a model used from another folder finds its data
    path_arguments: tuple[str, ...] = ()
    # the arguments that set a side of the encoder's input in pixels (a whole number; None: the source's preset):
    # checked against the model's encoder before a recorded source resizes any image to them
    size_arguments: tuple[str, ...] = ()

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


expect_base("data.source", CaptionSource)
