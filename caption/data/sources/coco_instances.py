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
its object could be scored nowhere; a box of no width or height inside it is left out, with one warning per file
naming them. Each image id, and each category id, is given once; a category's name has a letter or digit and no
control character. An image file of another size than its images[] entry says is measured from its header (once:
the header check of `ImageFileSource.check` reuses it): a copy of the same aspect ratio (a downscaled COCO) takes
its boxes rescaled, with one warning per instances file; another aspect ratio is refused. Which caption words name
which category: `caption.data.sources.category_words` (the files' own category names; COCO's synonyms for COCO's).
"""

from __future__ import annotations

import dataclasses
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from caption.data.sources.annotation_files import DatasetFormatError, field, read_json, shown
from caption.data.sources.records import Box, ImageRecord, ObjectBox
from caption.errors import CaptionWarning

BOX_SLACK_PX = 1.0  # a box reaching this far outside its image is clipped without a word (ours: rounding)
NAMED = 5  # annotations (or images) named in a file's warning
MAX_SIDE = 2**31 - 1  # the widest and tallest image any format Pillow reads can hold (PNG's)
SIZE_SLACK_PX = 1.0  # a copy of another size is of the same aspect ratio if each side is within this of the scale's


@dataclass(frozen=True)
class Instances:
    """The annotated objects of one image."""

    frame: tuple[int, int]  # (width, height) of the image file, the pixels of the boxes
    boxes: tuple[ObjectBox, ...]  # one per annotation; () for an image with none
    path: str  # the instances file that describes the image


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
        names = category_names(field(data, "categories", list, path), path=path)
        categories |= dict.fromkeys(names.values())
        frames = image_frames(field(data, "images", list, path), path=path)
        again = next((image_id for image_id in frames if image_id in found), None)
        if again is not None:
            raise DatasetFormatError(f"{path}: image id {shown(again)} is described by {found[again].path} too: give "
                                     "each image in one instances file (each file once)")
        boxes: dict[int, list[ObjectBox]] = {image_id: [] for image_id in frames}
        clipped: list[str] = []
        empty: list[str] = []
        for index, entry in enumerate(field(data, "annotations", list, path)):
            where = f"{path}: annotations[{index}]"
            image_id, category = field(entry, "image_id", int, where), field(entry, "category_id", int, where)
            if image_id not in frames:
                raise DatasetFormatError(f"{where}.image_id is {shown(image_id)}, "
                                         f"which {path} has no images[] entry for")
            if category not in names:
                raise DatasetFormatError(f"{where}.category_id is {shown(category)}, "
                                         f"which {path} has no categories[] entry for")
            bbox = field(entry, "bbox", list, where)
            named = f"{where} (id {shown(entry.get('id'))}, image {shown(image_id)})"
            box = within(corners(bbox, where), frames[image_id], where=named, bbox=bbox, clipped=clipped)
            if box[2] > box[0] and box[3] > box[1]:
                boxes[image_id].append(ObjectBox(label=names[category], box=box))
            else:
                empty.append(f"{named.rsplit(': ', 1)[-1]}: {shown(bbox)}")
        warn_named(path=path, what="boxes reaching outside their image are clipped to it", named=clipped)
        warn_named(path=path, what="boxes of no width or height are left out (no pixel of the image is theirs)",
                   named=empty)
        found |= {image_id: Instances(frames[image_id], tuple(boxes[image_id]), path) for image_id in frames}
    return InstancesFiles(found, tuple(categories))


def warn_named(*, path: str, what: str, named: list[str]) -> None:
    """One warning about the file `path`: `what` happens to the `named` annotations (the first NAMED of them)."""
    if named:
        more = f" and {len(named) - NAMED} more" if len(named) > NAMED else ""
        rank_zero_warn(f"{path}: {what} ({len(named)}): {'; '.join(named[:NAMED])}{more}", category=CaptionWarning)


def category_names(entries: list[Any], *, path: str) -> dict[int, str]:
    """Category id -> name, of the categories[] `entries` of the file `path`: each id once, each name with a
    letter or digit and no control character (else a `DatasetFormatError` naming the id); two ids of one name are
    one label, said in a warning."""
    names: dict[int, str] = {}
    for index, entry in enumerate(entries):
        where = f"{path}: categories[{index}]"
        category_id, name = field(entry, "id", int, where), field(entry, "name", str, where)
        if category_id in names:
            raise DatasetFormatError(f"{where}.id is {shown(category_id)}, the id of {names[category_id]!r} too (named "
                                     f"{name!r} here): give each category its own id")
        if not any(character.isalnum() for character in name) or any(
                unicodedata.category(character) in ("Cc", "Cs") for character in name):
            raise DatasetFormatError(f"{where}: category {shown(category_id)} is named {shown(name)}: give it the word "
                                     "captions use for it (a letter or digit, no control character)")
        same = next((other for other, known in names.items() if known == name), None)
        if same is not None:
            rank_zero_warn(f"{where}: categories {shown(same)} and {shown(category_id)} are both named {name!r}: "
                           "their boxes are one label", category=CaptionWarning)
        names[category_id] = name
    return names


def image_frames(entries: list[Any], *, path: str) -> dict[int, tuple[int, int]]:
    """Image id -> (width, height), of the images[] `entries` of the file `path`: each id once, each size positive
    (else a `DatasetFormatError` naming the entry)."""
    frames: dict[int, tuple[int, int]] = {}
    position: dict[int, int] = {}
    for index, entry in enumerate(entries):
        where = f"{path}: images[{index}]"
        image_id = field(entry, "id", int, where)
        frame = field(entry, "width", int, where), field(entry, "height", int, where)
        if min(frame) < 1 or max(frame) > MAX_SIDE:
            raise DatasetFormatError(f"{where} is {shown(frame[0])}x{shown(frame[1])} pixels; expected a positive "
                                     f"size of at most {MAX_SIDE} pixels a side")
        if image_id in frames:
            raise DatasetFormatError(f"{where}.id is {shown(image_id)}, the id of images[{position[image_id]}] too: "
                                     "give each image one images[] entry")
        frames[image_id], position[image_id] = frame, index
    return frames


def finite(value: Any) -> bool:
    """Whether `value` is a number (not a bool) of a finite float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def corners(bbox: list, where: str) -> tuple[float, float, float, float]:
    """COCO's [x, y, width, height] as (x0, y0, x1, y1); NaN or infinite coordinates (JSON's NaN, Infinity) are
    refused, not dropped."""
    if len(bbox) != 4 or not all(finite(v) for v in bbox) or bbox[2] < 0 or bbox[3] < 0 or not all(
            finite(bbox[k] + bbox[k + 2]) for k in (0, 1)):
        raise DatasetFormatError(f"{where}.bbox is {shown(bbox)}; expected [x, y, width, height] of finite numbers "
                                 "with width, height >= 0")
    x, y, width, height = (float(v) for v in bbox)
    return x, y, x + width, y + height


def within(box: Box, frame: tuple[int, int], *, where: str, bbox: list, clipped: list[str]) -> Box:
    """`box` clipped to its (width, height) `frame`; one reaching more than BOX_SLACK_PX outside is named in
    `clipped`; one wholly outside (of no size too) is a `DatasetFormatError`."""
    width, height = float(frame[0]), float(frame[1])
    x0, y0, x1, y1 = box
    inside = (min(max(x0, 0.0), width), min(max(y0, 0.0), height), min(max(x1, 0.0), width), min(max(y1, 0.0), height))
    if (x0 > width or y0 > height or x1 < 0 or y1 < 0
            or inside[2] <= inside[0] and x1 > x0 or inside[3] <= inside[1] and y1 > y0):
        raise DatasetFormatError(f"{where}: bbox {shown(bbox)} lies wholly outside its image of "
                                 f"{frame[0]}x{frame[1]} pixels: "
                                 "fix or remove the annotation (or the image's width and height)")
    if max(abs(a - b) for a, b in zip(box, inside)) > BOX_SLACK_PX:
        clipped.append(f"{where.rsplit(': ', 1)[-1]}: {shown(bbox)} in {frame[0]}x{frame[1]}")
    return inside


def same_aspect(size: tuple[int, int], frame: tuple[int, int]) -> bool:
    """Whether an image of `size` (width, height) is a copy of one of `frame` at another scale: each side within
    SIZE_SLACK_PX of the other side's scale (the copy's sides are rounded)."""
    return any(all(abs(side * scale - measured) <= SIZE_SLACK_PX for side, measured in zip(frame, size))
               for scale in (size[0] / frame[0], size[1] / frame[1]))


def in_file_pixels(instances: Instances, *, size: tuple[int, int], file: str, image_id: int) -> Instances:
    """`instances` in the pixels of its image `file` of `size` (width, height): as they are when the sizes agree,
    rescaled when the file is a copy of another scale; another aspect ratio is a `DatasetFormatError`."""
    if size == instances.frame:
        return instances
    (width, height), (frame_width, frame_height) = size, instances.frame
    if not same_aspect(size, instances.frame):
        raise DatasetFormatError(
            f"{file} is {width}x{height} pixels, but {instances.path} gives image {image_id} as "
            f"{frame_width}x{frame_height}, another aspect ratio: its boxes cannot be placed on it; give the image "
            "files the instances were made for, or fix that images[] entry's width and height")
    scale_x, scale_y = width / frame_width, height / frame_height
    boxes = tuple(dataclasses.replace(obj, box=(obj.box[0] * scale_x, obj.box[1] * scale_y, obj.box[2] * scale_x,
                                                obj.box[3] * scale_y)) for obj in instances.boxes)
    return Instances(size, boxes, instances.path)


def with_boxes(records: list[ImageRecord], instances: dict[int, Instances], *, paths: list[str], annotations: str,
               sizes: Mapping[str, tuple[int, int] | str] | None = None) -> list[ImageRecord]:
    """`records` with the objects and frame of their image id's instances, in the pixels of their image file of
    `sizes` (file -> (width, height), or why it cannot be read: then as the instances say); a record without any:
    unchanged, said in a warning. Instances that describe none of the records (another dataset's ids) raise
    `DatasetFormatError`."""
    if records and not any(record.image_id in instances for record in records):
        raise DatasetFormatError(
            f"{', '.join(paths)} describe none of the images of {annotations} (by COCO id): give the instances files "
            "of the same images, e.g. instances_train2014.json and instances_val2014.json for Karpathy's COCO split"
        )
    sizes = sizes or {}
    boxed, rescaled = [], {}
    for record in records:
        found = instances.get(record.image_id)
        size = sizes.get(record.file) if record.file is not None else None
        if found is not None and isinstance(size, tuple):
            fitted = in_file_pixels(found, size=size, file=str(record.file), image_id=record.image_id)
            if fitted.frame != found.frame:
                rescaled.setdefault(found.path, []).append(f"{record.file} is {size[0]}x{size[1]} pixels, "
                                                           f"{found.frame[0]}x{found.frame[1]} in it")
            found = fitted
        boxed.append(record if found is None else dataclasses.replace(record, objects=found.boxes, frame=found.frame))
    for path, files in rescaled.items():
        more = f" and {len(files) - 1} more" if len(files) > 1 else ""
        rank_zero_warn(f"{path}: {len(files)} image files are copies of another size than its images[] say, of the "
                       f"same aspect ratio ({files[0]}{more}): their boxes are rescaled to the files",
                       category=CaptionWarning)
    unboxed = [record.image_id for record in records if record.image_id not in instances]
    if unboxed:
        rank_zero_warn(f"{len(unboxed)} of the {len(records)} images of {annotations} have no images[] entry in "
                       f"{', '.join(paths)} (e.g. ids {unboxed[:NAMED]}), so no boxes: their attention is not scored",
                       category=CaptionWarning)
    return boxed
