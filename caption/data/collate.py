"""Items into batches: images (or cached annotations) stacked, captions (and their box targets) padded, references and
boxes kept as lists, and the images that failed to load left out and listed.
"""

from typing import Any

import torch

from caption.data.sources.image_files import BadImageError
from caption.model.vocabulary import Vocabulary


def collate(items: list[dict[str, Any]], *, allow_empty: bool = False) -> dict[str, Any]:
    """Stack images (or cached annotations), pad captions with <pad> to (B, T+1), keep references as lists.

    Images that failed to load (data.on_bad_image: skip) are left out and listed in batch["bad_images"]. A batch in
    which every image failed is an error, or with `allow_empty` (`caption predict`, which keeps the other batches'
    captions) a batch of no images: {"image_id": empty, "bad_images": [...]}.
    """
    bad = [item["bad_image"] for item in items if "bad_image" in item]
    items = [item for item in items if "bad_image" not in item]
    if not items and allow_empty:
        return {"image_id": torch.zeros(0, dtype=torch.long), "bad_images": bad}
    if not items:
        raise BadImageError(f"every image of a batch failed to load: {'; '.join(map(str, bad))} (with "
                            "data.batch_by_image a training batch holds only a few images: set it to false, or raise "
                            "data.batch_size, to skip such images with data.on_bad_image: skip)")
    key = "annotations" if "annotations" in items[0] else "image"
    batch: dict[str, Any] = {
        key: torch.stack([item[key] for item in items]),  # (B, 3, H, W) or (B, L, D)
        "image_id": torch.tensor([item["image_id"] for item in items]),
        "bad_images": bad,
    }
    if "caption" in items[0]:
        captions = [item["caption"] for item in items]
        batch["caption"] = torch.nn.utils.rnn.pad_sequence(captions, batch_first=True, padding_value=Vocabulary.PAD)
    if "box_target" in items[0]:  # attention supervised by boxes: (B, T, L), padding steps without a target
        batch["box_target"] = torch.nn.utils.rnn.pad_sequence([item["box_target"] for item in items], batch_first=True)
    if "references" in items[0]:
        batch["references"] = [item["references"] for item in items]
    if any("objects" in item for item in items):  # boxes: on some images only (COCO has unannotated ones)
        batch["objects"] = [item.get("objects", []) for item in items]
    if "file" in items[0]:
        batch["file"] = [item["file"] for item in items]
    return batch
