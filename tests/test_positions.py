"""The second synthetic dataset (benchmarks/positions.py) is real Karpathy-format data that the project reads."""

import sys
from pathlib import Path

from caption.data.karpathy import KarpathySource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from positions import KINDS, generate, place  # noqa: E402


def test_positions_dataset_loads_as_karpathy_json(tmp_path):
    annotations = generate(tmp_path, splits={"train": 6, "val": 2, "test": 2}, seed=1)
    source = KarpathySource(annotations=str(annotations), images=str(tmp_path / "images"), resize_size=64, crop_size=64)
    source.use_encoder("small_vgg")
    records = source.records()
    assert [record.split for record in records] == ["train"] * 6 + ["val"] * 2 + ["test"] * 2
    for record in records:
        assert source.image(record).shape == (3, 64, 64)
        canonical, with_positions = record.references[0], record.references[3]
        objects = sum(canonical.split().count(kind) for kind in KINDS)
        assert 1 <= objects <= 3 and with_positions.count(" is ") == objects, record.references
    assert generate(tmp_path, splits={"train": 1}) == annotations, "an existing dataset is kept"
    assert (place(0, 0), place(1, 1), place(2, 1), place(1, 2)) == (
        "in the top left", "in the center", "at the bottom", "on the right")
