import json
import re

import numpy as np
import pytest

from caption.data.sources.records import ImageRecord, ObjectBox
from caption.data.synthetic import shapes
from caption.data.synthetic.shapes import (
    BACKGROUND, COLORS, HELD_OUT_PAIRS, ShapeObject, generate_shapes, load_shapes, object_for_word,
)

RELATIONS = ("left of", "right of", "above", "below")


def _center(obj):
    x0, y0, x1, y1 = obj.box
    return (x0 + x1) / 2, (y0 + y1) / 2


def _relation_from_boxes(a, b):
    """Independent re-implementation: where is a relative to b (y grows downwards)."""
    (ax, ay), (bx, by) = _center(a), _center(b)
    dx, dy = bx - ax, by - ay
    if abs(dx) > abs(dy) + 6:
        return "left of" if dx > 0 else "right of"
    if abs(dy) > abs(dx) + 6:
        return "above" if dy > 0 else "below"
    return None


def _canonical(objects):
    if len(objects) == 1:
        (a,) = objects
        return f"a {a.size} {a.color} {a.kind}"
    a, b = objects
    rel = _relation_from_boxes(a, b)
    if rel in ("right of", "below"):
        a, b = b, a
        rel = _relation_from_boxes(a, b)
    return f"a {a.size} {a.color} {a.kind} {rel} a {b.size} {b.color} {b.kind}"


@pytest.fixture(scope="module")
def data():
    return generate_shapes(300, seed=7)


def test_shapes_and_dtype(data):
    images, records = data
    assert images.shape == (300, 64, 64, 3) and images.dtype == np.uint8
    assert len(records) == 300
    assert [r.image_id for r in records] == list(range(300))
    assert all(r.split == "train" and r.file is None for r in records)


def test_determinism():
    a_images, a_records = generate_shapes(20, seed=3)
    b_images, b_records = generate_shapes(20, seed=3)
    c_images, c_records = generate_shapes(20, seed=4)
    assert a_images.tobytes() == b_images.tobytes() and a_records == b_records
    assert a_images.tobytes() != c_images.tobytes() and a_records != c_records
    prefix_images, prefix_records = generate_shapes(5, seed=3)
    assert np.array_equal(prefix_images, a_images[:5]) and prefix_records == a_records[:5]


def test_objects_distinct_kinds_inside_canvas_non_overlapping(data):
    _, records = data
    for r in records:
        assert len(r.objects) == 2
        assert len({o.kind for o in r.objects}) == 2
        for o in r.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 64 and 0 <= y0 < y1 <= 64
            assert o.color in COLORS and o.kind in shapes.KINDS
            side = x1 - x0
            assert y1 - y0 == side
            assert (10 <= side <= 13) if o.size == "small" else (18 <= side <= 22)
        (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = (o.box for o in r.objects)
        assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0


def test_pixels_match_objects(data):
    images, records = data
    for image, r in zip(images, records):
        outside = np.ones(image.shape[:2], dtype=bool)
        for o in r.objects:
            x0, y0, x1, y1 = o.box
            assert tuple(image[(y0 + y1) // 2, (x0 + x1) // 2]) == COLORS[o.color]
            outside[y0:y1, x0:x1] = False
        assert (image[outside] == BACKGROUND).all()


def test_square_fills_its_box_and_triangle_points_up(data):
    images, records = data
    for image, r in zip(images, records):
        for o in r.objects:
            x0, y0, x1, y1 = o.box
            patch = (image[y0:y1, x0:x1] == COLORS[o.color]).all(-1)
            if o.kind == "square":
                assert patch.all()
            elif o.kind == "triangle":
                assert patch[-1].sum() > patch[1].sum()
            else:
                assert not patch[0, 0] and patch[(y1 - y0) // 2].all()


def test_five_distinct_references_with_canonical(data):
    _, records = data
    first_is_canonical = 0
    for r in records:
        assert len(r.references) == 5 and len(set(r.references)) == 5
        assert _canonical(r.objects) in r.references
        first_is_canonical += r.references[0] == _canonical(r.objects)
    assert 0 < first_is_canonical < len(records)  # canonical caption is not always in first position


def test_every_stated_relation_is_correct(data):
    _, records = data
    seen = set()
    for r in records:
        assert _relation_from_boxes(*r.objects) in ("left of", "above")  # canonical order
        for ref in r.references:
            rels = [rel for rel in RELATIONS if f" {rel} " in ref]
            if not rels:
                continue
            (rel,) = rels
            seen.add(rel)
            kinds = re.findall(r"circle|square|triangle", ref)
            assert len(kinds) == 2, ref
            first, second = (object_for_word(r.objects, k) for k in kinds)
            assert _relation_from_boxes(first, second) == rel, (ref, r.objects)
            for o in (first, second):
                assert o.color in ref or o.size in ref or f"the {o.kind}" in ref
    assert seen == set(RELATIONS)


def test_single_object_images():
    _, records = generate_shapes(100, seed=1, num_objects=(1, 2))
    counts = {len(r.objects) for r in records}
    assert counts == {1, 2}
    for r in records:
        assert len(set(r.references)) == 5 and _canonical(r.objects) in r.references
        if len(r.objects) == 1:
            assert not any(f" {rel} " in ref for ref in r.references for rel in RELATIONS)


def test_invalid_parameters():
    with pytest.raises(ValueError):
        generate_shapes(1, seed=0, num_objects=(2, 3))
    with pytest.raises(ValueError):
        generate_shapes(1, seed=0, image_size=16)


def test_other_image_size():
    images, records = generate_shapes(20, seed=0, image_size=128)
    assert images.shape == (20, 128, 128, 3)
    assert all(0 <= v <= 128 for r in records for o in r.objects for v in o.box)


def test_object_for_word():
    circle = ShapeObject(label="circle", box=(0, 0, 10, 10), color="red", size="small")
    square = ShapeObject(label="square", box=(20, 0, 40, 20), color="blue", size="large")
    assert object_for_word((circle, square), "square") is square
    assert object_for_word((circle, square), "triangle") is None
    assert object_for_word((circle, square), "red") is None


def test_record_dict_round_trip(data):
    _, records = data
    assert [ImageRecord.from_dict(r.to_dict(), read_object=ShapeObject.from_dict) for r in records] == records
    plain = ImageRecord(5, "val", ("a caption",), file="img/5.jpg")
    assert ImageRecord.from_dict(plain.to_dict()) == plain
    boxed = ImageRecord(6, "test", ("a dog",), file="img/6.jpg", objects=(ObjectBox("dog", (1.5, 2, 30, 40)),),
                        frame=(640, 480))
    assert ImageRecord.from_dict(boxed.to_dict()) == boxed


def _small(root):
    return load_shapes(root, num_train=30, num_val=10, num_test=10, seed=1)


def test_load_shapes_splits(tmp_path):
    images, records = _small(tmp_path)
    assert images.shape == (50, 64, 64, 3)
    assert [r.split for r in records] == ["train"] * 30 + ["val"] * 10 + ["test"] * 10
    assert len({r.image_id for r in records}) == 50
    train, val, test = images[:10], images[30:40], images[40:50]
    assert not np.array_equal(train, val) and not np.array_equal(val, test)


def test_load_shapes_cache_round_trip_and_reuse(tmp_path, monkeypatch):
    images, records = _small(tmp_path)
    (cache,) = tmp_path.iterdir()
    assert sorted(p.name for p in cache.iterdir()) == ["images.npy", "records.json"]

    def fail(*args, **kwargs):
        raise AssertionError("cache was not reused")

    monkeypatch.setattr(shapes, "generate_shapes", fail)
    cached_images, cached_records = _small(tmp_path)
    assert np.array_equal(cached_images, images) and cached_records == records

    # different parameters live in a different cache directory
    monkeypatch.undo()
    load_shapes(tmp_path, num_train=5, num_val=1, num_test=1, seed=1)
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize("damage", ["records_garbage", "images_garbage", "images_truncated", "records_missing"])
def test_load_shapes_regenerates_corrupt_cache(tmp_path, damage):
    images, records = _small(tmp_path)
    (cache,) = tmp_path.iterdir()
    if damage == "records_garbage":
        (cache / "records.json").write_text("{not json")
    elif damage == "images_garbage":
        (cache / "images.npy").write_bytes(b"garbage")
    elif damage == "images_truncated":
        data = (cache / "images.npy").read_bytes()
        (cache / "images.npy").write_bytes(data[: len(data) // 2])
    else:
        (cache / "records.json").unlink()
    again_images, again_records = _small(tmp_path)
    assert np.array_equal(again_images, images) and again_records == records
    assert _small(tmp_path)[1] == records  # and the repaired cache is readable


def test_the_generic_variant_holds_one_generic_reference_and_a_test_split_unlike_training(tmp_path):
    images, records = load_shapes(tmp_path, num_train=60, num_val=20, num_test=20, seed=1, generic_references=True,
                                  held_out_test=True)
    default_images, default_records = load_shapes(tmp_path, num_train=60, num_val=20, num_test=20, seed=1)
    for record in records:
        kinds = sorted(obj.kind for obj in record.objects)
        generic = [text for text in record.references if text.startswith("two shapes")]
        assert generic == [f"two shapes a {kinds[0]} and a {kinds[1]}"], record.references
        assert len(set(record.references)) == 5
        held_out = any((obj.kind, obj.color) in HELD_OUT_PAIRS for obj in record.objects)
        assert held_out == (record.split == "test"), (record.split, record.objects)
    assert not any(text.startswith("two shapes") for record in default_records for text in record.references)
    assert len(list(tmp_path.iterdir())) == 2, "each variant its own cache"
    assert not np.array_equal(images, default_images)


def test_a_splits_images_are_written_as_png_files_with_their_references(tmp_path):
    """`write_split_images`: the test images as files `caption describe` takes, pixel for pixel the cached ones."""
    from PIL import Image

    from caption.data.synthetic.shapes import write_split_images
    from caption.errors import ConfigError

    settings = {"root": tmp_path / "data", "num_train": 5, "num_val": 2, "num_test": 4, "seed": 1}
    files = write_split_images(tmp_path / "test_images", count=3, **settings)
    images, records = load_shapes(**settings)
    test = [(pixels, record) for pixels, record in zip(images, records) if record.split == "test"][:3]
    assert [file.name for file in files] == [f"shapes-{record.image_id}.png" for _, record in test]
    for file, (pixels, _) in zip(files, test):
        assert np.array_equal(np.asarray(Image.open(file)), pixels)
    references = json.loads((tmp_path / "test_images" / "references.json").read_text())
    assert references == {file.name: list(record.references) for file, (_, record) in zip(files, test)}
    assert len(write_split_images(tmp_path / "val", split="val", **settings)) == 2
    with pytest.raises(ConfigError, match="the built-in data's splits are train, val and test"):
        write_split_images(tmp_path / "x", split="tset", **settings)
