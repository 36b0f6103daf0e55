"""COCO's official object annotations (`instances_train2014.json`, `instances_val2014.json`, ...) as record boxes.

Each file holds

    {"images": [{"id": 391895, "width": 640, "height": 360, "file_name": "COCO_val2014_000000391895.jpg"}, ...],
     "annotations": [{"image_id": 391895, "category_id": 4, "bbox": [x, y, w, h], "iscrowd": 0, "area": ...}, ...],
     "categories": [{"id": 4, "name": "motorcycle", "supercategory": "vehicle"}, ...]}

with boxes in the pixels of the image file ([x, y, width, height] from its top-left corner). Each annotation becomes
an `ObjectBox` labelled with its category's name, box (x, y, x + w, y + h), and its image's record takes the image's
(width, height) as the frame of its boxes (`ImageRecord.frame`; `CaptionSource.input_boxes` maps them into the
encoder input). Crowd regions (iscrowd 1: a crowd of people, a herd) are boxes like the others. A box that reaches
outside its image is clipped to it, with one warning per file naming the annotations that reach out by more than
BOX_SLACK_PX; a box wholly outside its image is refused (`DatasetFormatError` naming the file and the annotation), as
its object could be scored nowhere. Which caption words name which category: `caption.data.sources.category_words`
(the files' own category names; COCO's synonyms for COCO's).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from lightning.pytorch.utilities import rank_zero_warn

from caption.data.sources.annotation_files import DatasetFormatError, field, read_json
from caption.data.sources.records import Box, ImageRecord, ObjectBox
from caption.errors import CaptionWarning

BOX_SLACK_PX = 1.0  # a box reaching this far outside its image is clipped without a word (ours: rounding)
NAMED = 5  # clipped boxes named in a file's warning


@dataclass(frozen=True)
class Instances:
    """The annotated objects of one image."""

    frame: tuple[int, int]  # (width, height) of the image file, the pixels of the boxes
    boxes: tuple[ObjectBox, ...]  # one per annotation; () for an image with none


@dataclass(frozen=True)
class InstancesFiles:
    """What the instances files of a dataset hold."""

    images: dict[int, Instances]  # COCO image id -> its objects
    categories: tuple[str, ...]  # every category name of the files, in the order of their categories[]


def read_instances(paths: list[str]) -> InstancesFiles:
    """The objects of every image and the category names of every instances file of `paths`; a malformed file
    raises `DatasetFormatError` naming the file and the entry."""
    found: dict[int, Instances] = {}
    categories: dict[str, None] = {}
    for path in paths:
        data = read_json(path)
        names = {}
        for index, entry in enumerate(field(data, "categories", list, path)):
            where = f"{path}: categories[{index}]"
            names[field(entry, "id", int, where)] = field(entry, "name", str, where)
            categories[names[field(entry, "id", int, where)]] = None
        frames = {}
        for index, entry in enumerate(field(data, "images", list, path)):
            where = f"{path}: images[{index}]"
            frame = field(entry, "width", int, where), field(entry, "height", int, where)
            if min(frame) < 1:
                raise DatasetFormatError(f"{where} is {frame[0]}x{frame[1]} pixels; expected a positive size")
            frames[field(entry, "id", int, where)] = frame
        boxes: dict[int, list[ObjectBox]] = {image_id: [] for image_id in frames}
        clipped: list[str] = []
        for index, entry in enumerate(field(data, "annotations", list, path)):
            where = f"{path}: annotations[{index}]"
            image_id, category = field(entry, "image_id", int, where), field(entry, "category_id", int, where)
            if image_id not in frames:
                raise DatasetFormatError(f"{where}.image_id is {image_id}, which {path} has no images[] entry for")
            if category not in names:
                raise DatasetFormatError(f"{where}.category_id is {category}, "
                                         f"which {path} has no categories[] entry for")
            bbox = field(entry, "bbox", list, where)
            named = f"{where} (id {entry.get('id')}, image {image_id})"
            box = within(corners(bbox, where), frames[image_id], where=named, bbox=bbox, clipped=clipped)
            boxes[image_id].append(ObjectBox(label=names[category], box=box))
        if clipped:
            more = f" and {len(clipped) - NAMED} more" if len(clipped) > NAMED else ""
            rank_zero_warn(f"{path}: boxes reaching outside their image are clipped to it ({len(clipped)}): "
                           f"{'; '.join(clipped[:NAMED])}{more}", category=CaptionWarning)
        found |= {image_id: Instances(frames[image_id], tuple(boxes[image_id])) for image_id in frames}
    return InstancesFiles(found, tuple(categories))


def corners(bbox: list, where: str) -> tuple[float, float, float, float]:
    """COCO's [x, y, width, height] as (x0, y0, x1, y1); NaN or infinite coordinates (JSON's NaN, Infinity) are
    refused, not dropped."""
    if len(bbox) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                 for v in bbox) or bbox[2] < 0 or bbox[3] < 0:
        raise DatasetFormatError(f"{where}.bbox is {bbox!r}; expected [x, y, width, height] of finite numbers with "
                                 "width, height >= 0")
    x, y, width, height = (float(v) for v in bbox)
    return x, y, x + width, y + height


def within(box: Box, frame: tuple[int, int], *, where: str, bbox: list, clipped: list[str]) -> Box:
    """`box` clipped to its (width, height) `frame`; one reaching more than BOX_SLACK_PX outside is named in
    `clipped`; one wholly outside is a `DatasetFormatError`."""
    width, height = float(frame[0]), float(frame[1])
    x0, y0, x1, y1 = box
    inside = (min(max(x0, 0.0), width), min(max(y0, 0.0), height), min(max(x1, 0.0), width), min(max(y1, 0.0), height))
    if inside[2] <= inside[0] and x1 > x0 or inside[3] <= inside[1] and y1 > y0:
        raise DatasetFormatError(f"{where}: bbox {bbox!r} lies wholly outside its image of "
                                 f"{frame[0]}x{frame[1]} pixels: "
                                 "fix or remove the annotation (or the image's width and height)")
    if max(abs(a - b) for a, b in zip(box, inside)) > BOX_SLACK_PX:
        clipped.append(f"{where.rsplit(': ', 1)[-1]}: {bbox!r} in {frame[0]}x{frame[1]}")
    return inside


def with_boxes(records: list[ImageRecord], instances: dict[int, Instances], *, paths: list[str],
               annotations: str) -> list[ImageRecord]:
    """`records` with the objects and frame of their image id's instances (a record without any: unchanged).
    Instances that describe none of the records (another dataset's ids) raise `DatasetFormatError`."""
    if records and not any(record.image_id in instances for record in records):
        raise DatasetFormatError(
            f"{', '.join(paths)} describe none of the images of {annotations} (by COCO id): give the instances files "
            "of the same images, e.g. instances_train2014.json and instances_val2014.json for Karpathy's COCO split"
        )
    return [
        dataclasses.replace(record, objects=instances[record.image_id].boxes, frame=instances[record.image_id].frame)
        if record.image_id in instances else record
        for record in records
    ]
