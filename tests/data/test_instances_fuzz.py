"""A bounded, seeded fuzz pass over COCO instances files: mutations of their ids, sizes, boxes and categories (wrong
types, missing keys, NaN, infinite, negative, huge, duplicates, deep nesting) and of their encoding (not UTF-8,
UTF-16, a byte-order mark, a lone surrogate, cut short), each read by `KarpathySource` as training reads it. Each
ends in one `CaptionError` line naming the file, or loads the original's records exactly, or, for a valid file that
means something else (a box reaching out of its image, an image id the dataset lacks), loads with a warning naming
the file; never a traceback, never a record the file did not say."""

import copy
import json
import math
import random
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from kit.data import coco_instances, karpathy_dataset

from caption.data.sources.karpathy import KarpathySource
from caption.errors import CaptionError

SEED = 0
MUTATIONS = 100
DIGITS = "@DIGITS@"  # stands for an integer of 5,000 digits, more than Python's int() takes from text (4,300)
WRONG_TYPES = ["7", None, [], {}, True, 1.5, "dog", [1, 2, 3, 4]]
NUMBERS = [float("nan"), float("inf"), -float("inf"), -10**6, -1e9, 10**30, 1e300, 10**4000, DIGITS, 0, -0.0]
READ = {"images": ("id", "width", "height", "file_name"),
        "annotations": ("id", "image_id", "category_id", "bbox", "area", "iscrowd"),
        "categories": ("id", "name", "supercategory")}


def load(root: Path, karpathy: Path, instances: list[Path]) -> tuple[dict[int, tuple[Any, ...]], list[str]]:
    """Each record's (frame, objects) by image id, and the warnings said while reading them."""
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"),
                            instances=[str(path) for path in instances])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        records = source.records()
    return {record.image_id: (record.frame, record.objects) for record in records}, [str(w.message) for w in said]


def mutate_value(data: dict[str, Any], rng: random.Random) -> str:
    """Change, remove or duplicate one field or entry of `data` in place; what was done, for the failure message."""
    part = rng.choice(sorted(READ))
    entries = data[part]
    index = rng.randrange(len(entries))
    entry = entries[index]
    kind = rng.choice(["remove", "wrong type", "number", "duplicate", "bbox", "entry", "part"])
    key = rng.choice(READ[part])
    if kind == "bbox" and part == "annotations":
        k = rng.randrange(4)
        entry["bbox"][k] = rng.choice(NUMBERS + WRONG_TYPES)
        return f"{part}[{index}].bbox[{k}] = {entry['bbox'][k]!r}"
    if kind == "remove":
        del entry[key]
        return f"del {part}[{index}].{key}"
    if kind == "duplicate":  # of an id, which is each entry's own
        entry["id"] = entries[(index + 1) % len(entries)]["id"]
        return f"{part}[{index}].id = that of the next entry"
    if kind == "entry":
        entries[index] = rng.choice([*WRONG_TYPES[:4], "x", 0])
        return f"{part}[{index}] = {entries[index]!r}"
    if kind == "part":
        data[part] = rng.choice([None, {}, "x", [[[]]], "[" * 100_000, DIGITS])
        return f"{part} = {str(data[part])[:20]!r}"
    entry[key] = rng.choice(WRONG_TYPES if kind == "wrong type" else NUMBERS)
    return f"{part}[{index}].{key} = {str(entry[key])[:20]!r}"


def mutated_bytes(data: dict[str, Any], rng: random.Random) -> tuple[bytes, str]:
    """The file's bytes after one mutation of its values or of its encoding, and what was done."""
    text = json.dumps(data)
    kind = rng.choice(["value"] * 14 + ["utf-16", "bom", "latin-1", "surrogate", "cut", "bytes"])
    if kind == "value":
        changed = copy.deepcopy(data)
        done = mutate_value(changed, rng)
        text = json.dumps(changed).replace(json.dumps(DIGITS), "9" * 5000).replace(json.dumps("[" * 100_000),
                                                                                   "[" * 100_000)
        return text.encode(), done
    name = data["categories"][1]["name"]
    if kind == "utf-16":
        return text.encode("utf-16"), kind
    if kind == "bom":
        return b"\xef\xbb\xbf" + text.encode(), kind
    if kind == "latin-1":
        return text.replace(f'"{name}"', '"café"').encode("latin-1"), kind
    if kind == "surrogate":
        key = rng.choice(["name", "supercategory"])
        changed = text.replace(f'"{key}": "{data["categories"][1][key]}"', f'"{key}": "x\\ud800"')
        return changed.encode(), f"{key} {kind}"
    if kind == "cut":
        at = rng.randrange(len(text))
        return text[:at].encode(), f"cut at {at}"
    at = rng.randrange(len(text))
    return text[:at].encode() + bytes([rng.randrange(128, 256)]) + text[at:].encode(), f"a byte at {at}"


def sane(records: dict[int, tuple[Any, ...]]) -> bool:
    """Whether every frame is a positive size and every box finite, of some size and inside its frame."""
    return all(frame is None or min(frame) >= 1 and all(
        all(math.isfinite(v) for v in obj.box) and 0 <= obj.box[0] < obj.box[2] <= frame[0]
        and 0 <= obj.box[1] < obj.box[3] <= frame[1] and obj.label.strip() for obj in objects)
        for frame, objects in records.values())


def test_a_mutated_instances_file_is_one_line_or_loads_as_it_was_or_says_what_changed(tmp_path):
    root, karpathy = tmp_path, karpathy_dataset(tmp_path)
    instances = coco_instances(root, karpathy)
    original, said = load(root, karpathy, instances)
    assert not said and sane(original)
    texts = [path.read_bytes() for path in instances]
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    for _ in range(MUTATIONS):
        which = rng.randrange(len(instances))
        content, done = mutated_bytes(json.loads(texts[which]), rng)
        instances[which].write_bytes(content)
        try:
            found, said = load(root, karpathy, instances)
        except CaptionError as error:
            message = str(error)
            assert "\n" not in message and str(instances[which]) in message, (done, message)
            assert len(message) < 600, (done, message)
            outcomes["refused"] += 1
        else:
            assert sane(found), done
            if found == original:
                outcomes["as it was"] += 1
            else:
                assert any(str(instances[which]) in warning for warning in said), (done, said)
                outcomes["said"] += 1
        instances[which].write_bytes(texts[which])
    assert outcomes["refused"] > MUTATIONS / 2 and outcomes["as it was"], outcomes  # the pass reaches both

