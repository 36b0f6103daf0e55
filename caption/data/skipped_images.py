"""The images that failed only while loading, skipped (data.on_bad_image: skip): counted as batches arrive, the run
stopped past `data.max_skipped_share`, and all of them listed at the end.

`collate` leaves such an image out of its batch and lists it in batch["bad_images"]; a failed image file given to
`caption predict` (outside the dataset) is only warned about.
"""

from collections.abc import Callable
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from caption.data.datasets import PREDICTED
from caption.data.sources.image_files import BadImageError, list_bad_images
from caption.data.sources.records import BadImage
from caption.errors import CaptionWarning


class SkippedImages:
    """The images that failed while loading and were skipped, by id, at most `max_share` of all images."""

    def __init__(self, *, max_share: float) -> None:
        self.max_share = max_share
        self.failed: dict[int, BadImage] = {}  # images that failed while loading (on_bad_image: skip), by id

    def count(self, batch: dict[str, Any], *, total: Callable[[], int]) -> dict[str, Any]:
        """Count the images `collate` left out of `batch` because they failed to load; stop past `max_share` of the
        `total()` images."""
        bad_images = batch.pop("bad_images", [])
        for bad in [bad for bad in bad_images if bad.split == PREDICTED]:  # files from outside the dataset
            rank_zero_warn(f"skipping {bad.file}: {bad.reason}", category=CaptionWarning)
        new = [bad for bad in bad_images if bad.split != PREDICTED and bad.image_id not in self.failed]
        for bad in new:
            self.failed[bad.image_id] = bad
            rank_zero_warn(f"skipping {bad} (data.on_bad_image: skip); {len(self.failed)} such images so far",
                           category=CaptionWarning)
        if new and len(self.failed) > self.max_share * (images := total()):
            raise BadImageError(
                f"{len(self.failed)} of {images} images failed while loading, more than data.max_skipped_share="
                f"{self.max_share}: {list_bad_images(list(self.failed.values()))}. Fix or remove them, or "
                "run `caption features` or set data.check_images: decode to find them all before training"
            )
        return batch

    def report(self) -> None:
        """List, at the end, the images that failed while loading and were skipped."""
        if self.failed:
            rank_zero_warn(f"skipped {len(self.failed)} images that failed while loading (data.on_bad_image: skip): "
                           f"{list_bad_images(list(self.failed.values()))}", category=CaptionWarning)
