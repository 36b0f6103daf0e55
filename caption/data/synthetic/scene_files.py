"""Generated scenes written as a real dataset: PNG files, Karpathy's JSON and a COCO-format instances file.

The benchmarks' synthetic datasets (`caption.data.synthetic.positions`, `caption.data.synthetic.silhouettes`) are
written in the formats real data comes in and read back as real data is, by
`caption.data.sources.karpathy.KarpathySource` with `instances`. A dataset NAME lies in one folder:
ROOT/images/<image id>.png, ROOT/dataset_NAME.json (Karpathy's format) and ROOT/instances_NAME.json (COCO's; its
categories are the scene's own nouns, whose names attention accuracy scores). The JSON files are written last, each
whole, so a half-written dataset is never taken for one. More: docs/datasets.md#generated-datasets-in-the-real-formats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from caption.data.sources.records import ObjectBox
from caption.io.outputs import write_json
from caption.model.vocabulary import tokenize

IMAGES = "images"


@dataclass(frozen=True)
class Scene:
    """One generated image, its reference captions and the boxes of what they name (pixels of the image)."""

    image: Image.Image
    captions: tuple[str, ...]
    objects: tuple[ObjectBox, ...]


@dataclass(frozen=True)
class SceneFiles:
    """Where a written dataset lies: what `KarpathySource` takes as annotations, images and instances."""

    annotations: Path
    images: Path
    instances: Path

    def source_settings(self, *, image_size: int) -> dict:
        """The `data.source` of a config that reads the dataset at its own size (no resize, no crop)."""
        return {"class_path": "caption.data.sources.karpathy.KarpathySource",
                "init_args": {"annotations": str(self.annotations), "images": str(self.images),
                              "instances": [str(self.instances)], "resize_size": image_size, "crop_size": image_size}}


def scene_files(root: Path, name: str) -> SceneFiles:
    """The paths of the dataset called `name` under `root`."""
    return SceneFiles(root / f"dataset_{name}.json", root / IMAGES, root / f"instances_{name}.json")


def write_scenes(root: Path, *, name: str, categories: tuple[str, ...], splits: dict[str, int], seed: int,
                 scene: Callable[[np.random.Generator], Scene]) -> SceneFiles:
    """Draw `splits` images ({"train": 3000, "val": 200, "test": 200}) with `scene` from one seeded generator and
    write them under `root` as the dataset `name`, its boxes labelled by `categories`; kept if written already."""
    files = scene_files(root, name)
    if files.annotations.is_file() and files.instances.is_file():
        return files
    files.images.mkdir(parents=True, exist_ok=True)
    category_ids = {category: index + 1 for index, category in enumerate(categories)}
    entries, images, annotations = [], [], []
    for imgid, split, drawn in drawn_scenes(splits, np.random.default_rng(seed), scene):
        filename = f"{imgid:05d}.png"
        drawn.image.save(files.images / filename)
        entries.append({"filename": filename, "imgid": imgid, "split": split,
                        "sentences": [{"raw": caption, "tokens": tokenize(caption)} for caption in drawn.captions]})
        width, height = drawn.image.size
        images.append({"id": imgid, "file_name": filename, "width": width, "height": height})
        for found in drawn.objects:
            x0, y0, x1, y1 = (round(float(value), 2) for value in found.box)
            annotations.append({"id": len(annotations) + 1, "image_id": imgid, "category_id": category_ids[found.label],
                                "bbox": [x0, y0, round(x1 - x0, 2), round(y1 - y0, 2)],
                                "area": round((x1 - x0) * (y1 - y0), 2), "iscrowd": 0})
    write_json(files.instances, {"images": images, "annotations": annotations, "categories": [
        {"id": index, "name": category, "supercategory": name} for category, index in category_ids.items()]})
    write_json(files.annotations, {"images": entries, "dataset": name})
    return files


def drawn_scenes(splits: dict[str, int], rng: np.random.Generator,
                 scene: Callable[[np.random.Generator], Scene]) -> Iterator[tuple[int, str, Scene]]:
    """(image id, split, scene) for every image, ids counting from 0 across the splits in order."""
    imgid = 0
    for split, count in splits.items():
        for _ in range(count):
            yield imgid, split, scene(rng)
            imgid += 1
