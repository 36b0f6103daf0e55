"""COCO, Flickr8k and Flickr30k on the standard (Karpathy) splits, and any dataset in the same format.

`KarpathySource` reads Karpathy's `dataset_*.json`; `CocoSource` the official caption files with a split file
(Karpathy's `dataset_coco.json` or `{"train": [ids], ...}`); both take COCO-format instances files for the boxes that
attention accuracy scores. COCO's `restval` trains by default; every reference is kept for scoring; captions are
re-tokenised from `raw` with `caption.model.vocabulary.tokenize`, as in every source, a lone UTF-16 surrogate in one
replaced by U+FFFD with a warning (`caption_text`); COCO's image ids are its `cocoid`s. The file formats:
data/README.md.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Literal

from caption.data.sources.annotation_files import DatasetFormatError, caption_text, field, read_json, warn_replaced
from caption.data.sources.category_words import LABELS_KEY, category_word_labels
from caption.data.sources.coco_instances import read_instances, with_boxes
from caption.data.sources.image_source import ImageFileSource
from caption.data.sources.records import ImageRecord
from caption.errors import ConfigError

KARPATHY_SPLITS = ("train", "restval", "val", "test")
Restval = Literal["train", "drop"]


def map_split(split: str, restval: Restval, where: str) -> str | None:
    """A Karpathy split name as one of ours (train/val/test), or None for a dropped restval image."""
    if split not in KARPATHY_SPLITS:
        raise DatasetFormatError(f"{where}.split is {split!r}; expected one of {', '.join(KARPATHY_SPLITS)}")
    if split == "restval":
        return "train" if restval == "train" else None
    return split


def unique_ids(records: list[ImageRecord], path: str) -> list[ImageRecord]:
    """`records`, after checking that no image id appears twice."""
    seen: set[int] = set()
    for record in records:
        if record.image_id in seen:
            raise DatasetFormatError(f"{path}: image id {record.image_id} appears more than once")
        seen.add(record.image_id)
    return records


class InstancesSource(ImageFileSource):
    """An image-file source whose records can take their boxes from COCO-format instances files (None: no boxes),
    and whose word -> label map comes from those files' categories (`caption.data.sources.category_words`).

    Args:
        resize_size: the short side is resized to this (None: the encoder weights' preset, 256).
        crop_size: then centre-cropped to a square of this side (None: the encoder weights' preset, 224).
        min_side: images whose short side is smaller are bad (ours: 32).
        instances: COCO-format object annotations, e.g. [instances_train2014.json, instances_val2014.json]: boxes
            for attention accuracy, of the files' own categories, named in captions by their names (None: no boxes).
        labels: more caption words of the categories, {word: category name}, e.g. {pup: dog} (None: the names).
    """

    def __init__(self, *, resize_size: int | None = None, crop_size: int | None = None, min_side: int = 32,
                 instances: list[str] | None = None, labels: dict[str, str] | None = None):
        super().__init__(resize_size=resize_size, crop_size=crop_size, min_side=min_side)
        if labels and instances is None:
            raise ConfigError(f"{LABELS_KEY} maps caption words to the labels of boxes, but there are no boxes: "
                              "give the instances files too (data.source.init_args.instances)")
        self.instances = instances
        self.labels = labels
        self._word_labels: dict[str, str] | None = None

    @property
    def word_labels(self) -> dict[str, str]:
        """Caption word -> category of the instances files (their names, singular and plural; COCO's synonyms for
        COCO's categories; then `labels`); empty without instances."""
        if self.instances is None:
            return {}
        if self._word_labels is None:
            self.records()  # reads the instances files
        return self._word_labels

    def boxed(self, records: list[ImageRecord], annotations: str) -> list[ImageRecord]:
        """`records` with the boxes of the instances files, if any, in the pixels of their image files (their sizes
        read from the headers, which the header check then reuses; `annotations`: where the records come from)."""
        if self.instances is None:
            return records
        found = read_instances(self.instances)
        self._word_labels = category_word_labels(found.categories, labels=self.labels, where=", ".join(self.instances))
        sizes = self.header_sizes([record for record in records if record.image_id in found.images])
        return with_boxes(records, found.images, paths=self.instances, annotations=annotations, sizes=sizes)


class KarpathySource(InstancesSource):
    """A dataset in Karpathy's JSON format (COCO, Flickr8k, Flickr30k, or your own).

    Args:
        annotations: the dataset file, e.g. data/coco/dataset_coco.json.
        images: the image root; an image is at images/filepath/filename (filepath: COCO only).
        restval: "train" (default: COCO's 113,287 training images) or "drop".
        **image_settings: resize_size, crop_size, min_side, instances and labels, as `InstancesSource` takes them.
    """

    path_arguments = ("annotations", "images", "instances")

    def __init__(
        self,
        *,
        annotations: str,
        images: str,
        restval: Restval = "train",
        **image_settings: Any,
    ):
        super().__init__(**image_settings)
        self.annotations = annotations
        self.images = images
        self.restval = restval

    def read_records(self) -> list[ImageRecord]:
        data = read_json(self.annotations)
        entries = field(data, "images", list, self.annotations)
        records, replaced = [], []
        for index, entry in enumerate(entries):
            where = f"{self.annotations}: images[{index}]"
            split = map_split(field(entry, "split", str, where), self.restval, where)
            filename = field(entry, "filename", str, where)
            image_id = field(entry, "cocoid" if "cocoid" in entry else "imgid", int, where)
            references = tuple(
                caption_text(self._raw(sentence, f"{where}.sentences[{k}]"), replaced=replaced,
                             where=f"images[{index}].sentences[{k}] (image {image_id})")
                for k, sentence in enumerate(field(entry, "sentences", list, where)))
            folder = field(entry, "filepath", str, where) if "filepath" in entry else ""  # COCO's only
            if split is not None:
                file = os.path.join(self.images, folder, filename)
                records.append(ImageRecord(image_id, split, references, file=file))
        warn_replaced(replaced, path=self.annotations)
        return self.boxed(unique_ids(records, self.annotations), self.annotations)

    @staticmethod
    def _raw(sentence: Any, where: str) -> str:
        """The raw caption, or its tokens joined if a hand-made file has only those."""
        if isinstance(sentence, dict) and "raw" not in sentence and "tokens" in sentence:
            return " ".join(str(token) for token in field(sentence, "tokens", list, where))
        return field(sentence, "raw", str, where)


class CocoSource(InstancesSource):
    """The official COCO caption annotations on a split given by a separate file.

    Args:
        annotations: official caption files, e.g. [captions_train2014.json, captions_val2014.json].
        images: one image folder per annotation file, e.g. [data/coco/train2014, data/coco/val2014].
        splits: Karpathy's dataset_coco.json (split per cocoid) or {"train": [ids], "val": [...], "test": [...]}.
            Images of the annotation files that the split file does not list are left out.
        restval: "train" (default) or "drop", for a Karpathy split file.
        **image_settings: resize_size, crop_size, min_side, instances and labels, as `InstancesSource` takes them.
    """

    path_arguments = ("annotations", "images", "splits", "instances")

    def __init__(
        self,
        *,
        annotations: list[str],
        images: list[str],
        splits: str,
        restval: Restval = "train",
        **image_settings: Any,
    ):
        super().__init__(**image_settings)
        if len(annotations) != len(images):
            raise ValueError(
                f"source.annotations and source.images must pair up (one image folder per annotation file); "
                f"got {len(annotations)} and {len(images)}"
            )
        self.annotations = annotations
        self.images = images
        self.splits = splits
        self.restval = restval

    def read_splits(self) -> dict[int, str]:
        """COCO image id -> train/val/test, from the split file."""
        data = read_json(self.splits)
        if isinstance(data, dict) and "images" in data:  # Karpathy's dataset_coco.json
            splits = {}
            for index, entry in enumerate(field(data, "images", list, self.splits)):
                where = f"{self.splits}: images[{index}]"
                split = map_split(field(entry, "split", str, where), self.restval, where)
                if split is not None:
                    splits[field(entry, "cocoid", int, where)] = split
            return splits
        if not isinstance(data, dict) or not data or not set(data) <= {"train", "val", "test"}:
            raise DatasetFormatError(
                f"{self.splits}: expected Karpathy's dataset_coco.json or {{\"train\": [ids], \"val\": [ids], "
                f"\"test\": [ids]}}"
            )
        splits = {}
        for split in data:
            for image_id in field(data, split, list, self.splits):
                if not isinstance(image_id, int) or isinstance(image_id, bool):
                    raise DatasetFormatError(f"{self.splits}: {split} holds {image_id!r}; expected integer COCO ids")
                splits[image_id] = split
        return splits

    def read_records(self) -> list[ImageRecord]:
        splits = self.read_splits()
        files: dict[int, str] = {}
        captions: dict[int, list[str]] = defaultdict(list)
        for path, folder in zip(self.annotations, self.images):
            data = read_json(path)
            for index, entry in enumerate(field(data, "images", list, path)):
                where = f"{path}: images[{index}]"
                files[field(entry, "id", int, where)] = os.path.join(folder, field(entry, "file_name", str, where))
            replaced: list[str] = []
            for index, entry in enumerate(field(data, "annotations", list, path)):
                where = f"{path}: annotations[{index}]"
                image_id = field(entry, "image_id", int, where)
                captions[image_id].append(caption_text(field(entry, "caption", str, where), replaced=replaced,
                                                       where=f"annotations[{index}] (image {image_id})"))
            warn_replaced(replaced, path=path)
        missing = sorted(set(splits) - set(files))
        if missing:
            raise DatasetFormatError(
                f"{self.splits} lists {len(missing)} images that no annotation file has (e.g. ids {missing[:5]}): "
                f"give every annotation file the split covers (COCO: captions_train2014.json and captions_val2014.json)"
            )
        uncaptioned = sorted(image_id for image_id in splits if not captions[image_id])
        if uncaptioned:
            raise DatasetFormatError(f"{len(uncaptioned)} images have no caption in {self.annotations} "
                                     f"(e.g. ids {uncaptioned[:5]})")
        records = [
            ImageRecord(image_id, splits[image_id], tuple(captions[image_id]), file=files[image_id])
            for image_id in sorted(files)
            if image_id in splits
        ]
        return self.boxed(records, ", ".join(self.annotations))
