"""The generated datasets of the benchmarks (positions, silhouettes) are real data that the project reads: Karpathy's
JSON for the captions and a COCO-format instances file for the boxes, through `KarpathySource`."""

import json
import re

import numpy as np
import pytest
from PIL import Image

from caption.data.sources.karpathy import KarpathySource
from caption.data.synthetic import positions, silhouettes


def read(files, size):
    source = KarpathySource(annotations=str(files.annotations), images=str(files.images),
                            instances=[str(files.instances)], resize_size=size, crop_size=size)
    source.use_encoder("small_vgg")
    return source


def test_positions_dataset_loads_with_a_box_for_each_object(tmp_path):
    files = positions.generate(tmp_path, splits={"train": 6, "val": 2, "test": 2}, seed=1)
    source = read(files, positions.SIZE)
    records = source.records()
    assert [record.split for record in records] == ["train"] * 6 + ["val"] * 2 + ["test"] * 2
    for record in records:
        assert source.image(record).shape == (3, 64, 64)
        canonical, with_positions = record.references[0], record.references[3]
        named = [word for word in canonical.split() if word in positions.KINDS]
        assert 1 <= len(named) <= 3 and with_positions.count(" is ") == len(named), record.references
        assert sorted(box.label for box in record.objects) == sorted(named)
        assert record.frame == (64, 64) and source.input_boxes(record) == tuple(box.plain() for box in record.objects)
    assert positions.generate(tmp_path, splits={"train": 1}) == files, "an existing dataset is kept"
    assert (positions.place(0, 0), positions.place(1, 1), positions.place(2, 1), positions.place(1, 2)) == (
        "in the top left", "in the center", "at the bottom", "on the right")


def tight(pixels: np.ndarray, box, background) -> bool:
    """Whether each edge row and column of `box` holds a pixel that is not the background."""
    x0, y0, x1, y1 = (int(value) for value in box)
    crop = np.any(pixels[y0:y1, x0:x1] != background, axis=-1)
    return bool(crop[0].any() and crop[-1].any() and crop[:, 0].any() and crop[:, -1].any())


def test_silhouettes_dataset_loads_with_tight_boxes_named_left_to_right(tmp_path):
    files = silhouettes.generate(tmp_path, splits={"train": 8, "val": 2, "test": 2}, seed=3)
    source = read(files, silhouettes.SIZE)
    records = source.records()
    assert len(records) == 12 and source.image_size == (96, 96)
    categories = {entry["name"] for entry in json.loads(files.instances.read_text())["categories"]}
    assert categories == set(silhouettes.CATEGORIES) and "table lamp" in categories
    for record in records:
        assert source.image(record).shape == (3, 96, 96)
        assert 3 <= len(record.objects) <= 5 and {box.label for box in record.objects} <= categories
        listed = record.references[1]  # "a house , a car and a table lamp": left to right
        assert re.findall(r"\ban? ([a-z]+(?: lamp)?)", listed) == [box.label for box in record.objects], listed
        pixels = np.asarray(Image.open(record.file).convert("RGB"))
        for box in record.objects:
            assert tight(pixels, box.box, pixels[0, 0]), (record.file, box)
    assert silhouettes.generate(tmp_path, splits={"train": 1}) == files, "an existing dataset is kept"


@pytest.mark.parametrize(("labels", "said"), [
    (["house", "house", "car"], "two houses and a car"),
    (["table lamp", "umbrella", "table lamp", "table lamp"], "three table lamps and an umbrella"),
])
def test_silhouette_captions_count_each_category(labels, said):
    assert silhouettes.counted(labels) == said
