"""The captions a model can learn from and be scored against: those with a letter or digit.

Captions without one (empty, whitespace, punctuation only) are left out, and so are the images left with no
caption; both are counted in warnings, the images named per split (leaving out val or test images makes their
scores incomparable with those on the full split).
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from lightning.pytorch.utilities import rank_zero_warn

from caption.data.sources.records import ImageRecord


def with_usable_captions(records: Iterable[ImageRecord]) -> list[ImageRecord]:
    """`records` without their captions that have no letter or digit, and without the images left with none (or that
    had none), with a warning for each."""
    usable, empty, uncaptioned = [], 0, defaultdict(list)
    for record in records:
        references = tuple(text for text in record.references if any(ch.isalnum() for ch in text))
        empty += len(record.references) - len(references)
        if references:
            usable.append(replace(record, references=references))
        else:
            uncaptioned[record.split].append(record.image_id)
    report_uncaptioned(empty_captions=empty, uncaptioned=uncaptioned)
    return usable


def report_uncaptioned(*, empty_captions: int, uncaptioned: dict[str, list[int]]) -> None:
    """Warn about captions without words, and name per split the images left with no usable caption."""
    if empty_captions:
        rank_zero_warn(f"left out {empty_captions} captions without words (empty, whitespace or punctuation only)")
    for split, ids in uncaptioned.items():
        shown = ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        changed = "" if split == "train" else (
            f": the {split} set is not the full split, so its scores are not comparable with those on the full split"
        )
        rank_zero_warn(f"left out {len(ids)} {split} images without a usable caption (ids {shown}){changed}")
