"""The datasets of the data module: (image, caption) pairs for training, images with their references for
evaluation, and image files from outside the dataset for `caption predict`.

Training iterates over (image, caption) pairs, as the paper does; validation and test iterate over
images, each carrying all its references for corpus-level scoring. An item holds the image (or its cached
annotations), or, with `skip_bad`, the `BadImage` it failed as (`caption.data.collate` leaves it out).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from caption.data.box_targets import BoxTargets
from caption.data.features import FeatureCache
from caption.data.sources.base import CaptionSource
from caption.data.sources.category_words import named_labels
from caption.data.sources.image_files import BadImageError, read_rgb
from caption.data.sources.records import BadImage, ImageRecord
from caption.model.vocabulary import Vocabulary, tokenize

LongCaptions = Literal["truncate", "drop"]
PREDICTED = "files"  # the split of `BadImage`s among the image files `caption predict` is given


def inputs(
    source: CaptionSource, features: FeatureCache | None, record: ImageRecord, *, skip_bad: bool = False
) -> dict[str, Any]:
    """{"annotations": (L, D)} from the feature cache if there is one, else {"image": (3, H, W)}.

    With `skip_bad`, an image that fails to load gives {"bad_image": BadImage} instead of raising;
    `collate` leaves it out of the batch and lists it.
    """
    if features is not None:
        return {"annotations": features.annotations(record.image_id)}
    try:
        return {"image": source.image(record)}
    except BadImageError as error:
        if not skip_bad:
            raise
        return {"bad_image": error.bad or BadImage(record.image_id, record.split, record.file, str(error))}


class CaptionPairs(Dataset):
    """One item per (image, reference caption) of the given records.

    Captions longer than `max_length` words are cut to that length or left out (`long_captions`),
    counted in `truncated` and `dropped`. `lengths[i]` is item i's length in tokens with <start>/<end>. With
    `box_targets` (attention supervised by boxes) an item also holds "box_target" (n+1, L), where each word should
    look (`caption.data.box_targets`).
    """

    def __init__(
        self,
        source: CaptionSource,
        records: list[ImageRecord],
        vocabulary: Vocabulary,
        max_length: int,
        long_captions: LongCaptions = "truncate",
        features: FeatureCache | None = None,
        skip_bad: bool = False,
        box_targets: BoxTargets | None = None,
    ):
        self.source = source
        self.records = records
        self.features = features
        self.skip_bad = skip_bad
        self.box_targets = box_targets
        self.items: list[tuple[int, list[int]]] = []
        self.labels: list[list[str | None]] = []  # with box_targets: the label each word of item i names
        self.truncated = self.dropped = 0
        for index, record in enumerate(records):
            for reference in record.references:
                tokens = tokenize(reference)
                if len(tokens) > max_length and long_captions == "drop":
                    self.dropped += 1
                    continue
                self.truncated += len(tokens) > max_length
                if tokens:
                    self.items.append((index, vocabulary.encode(tokens[:max_length])))
                    if box_targets is not None:
                        self.labels.append(named_labels(tokens[:max_length], box_targets.word_labels))
        self.lengths = [len(caption) for _, caption in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record_index, caption = self.items[index]
        record = self.records[record_index]
        item = inputs(self.source, self.features, record, skip_bad=self.skip_bad)  # {"image": (3, H, W)}, ...
        item = {**item, "caption": torch.tensor(caption), "image_id": record.image_id}
        if self.box_targets is None:
            return item
        target = self.box_targets.caption_target(self.labels[index], self.source.input_boxes(record))  # (n+1, L)
        return item | {"box_target": target}


class Images(Dataset):
    """One item per image, with all its raw references (scored after coco-caption's PTB tokenizer)."""

    def __init__(
        self, source: CaptionSource, records: list[ImageRecord], features: FeatureCache | None = None,
        skip_bad: bool = False,
    ):
        self.source = source
        self.records = records
        self.features = features
        self.skip_bad = skip_bad

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        item = inputs(self.source, self.features, record, skip_bad=self.skip_bad)
        item = {**item, "image_id": record.image_id, "references": list(record.references)}
        # boxes in the encoder input's frame, for attention accuracy; plain dicts, as Lightning moves batches through
        # its collections
        boxes = self.source.input_boxes(record)
        return item | ({"objects": [box.to_dict() for box in boxes]} if boxes else {})


class ImageFiles(Dataset):
    """Image files from outside the dataset (`caption predict` on a folder): each prepared with the source's
    `inference_transform`; an unreadable one is skipped with a warning (`collate` leaves it out)."""

    def __init__(self, files: list[Path], transform: Callable[[Image.Image], Tensor]):
        self.files = files
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict[str, Any]:
        file = self.files[index]
        try:
            image = self.transform(read_rgb(str(file), min_side=1))  # (3, H, W)
        except BadImageError as error:
            return {"bad_image": BadImage(index, PREDICTED, str(file), str(error))}
        return {"image": image, "image_id": index, "file": str(file)}
