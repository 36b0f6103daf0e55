"""The positions dataset: crosses, rings, bars and diamonds in a 3×3 layout, with captions that say where each is.

1 to 3 objects (cross, ring, bar, diamond; purple, orange, black, cyan) on a light 64×64 canvas, each in its own cell
of a 3×3 layout (top left ... bottom right) with a few pixels of jitter. Five captions per image, objects in reading
order, e.g. "a purple cross in the top left and an orange ring in the center"; one template names no positions.
Written by `generate` as a real dataset (`caption.data.synthetic.scene_files`: PNG files, `dataset_positions.json`,
`instances_positions.json` with each object's box, labelled by its kind) and read like COCO or Flickr by
`caption.data.sources.karpathy.KarpathySource`. The benchmark that trains on it: benchmarks/positions.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from caption.data.sources.records import Box, ObjectBox
from caption.data.synthetic.scene_files import Scene, SceneFiles, write_scenes

NAME = "positions"
KINDS = ("cross", "ring", "bar", "diamond")
COLORS = {"purple": (128, 40, 160), "orange": (240, 130, 20), "black": (20, 20, 20), "cyan": (30, 190, 200)}
ROWS, COLUMNS = ("top", "middle", "bottom"), ("left", "center", "right")
BACKGROUND = (225, 222, 210)
SIZE, CELL = 64, 64 / 3
CAPTION_LENGTH = 24  # words: three objects and their places take up to 22


def place(row: int, column: int) -> str:
    """Where a cell is, in words: "in the top left", "in the center", "at the bottom" ..."""
    if row == 1 and column == 1:
        return "in the center"
    if row == 1:
        return f"on the {COLUMNS[column]}"
    if column == 1:
        return f"at the {ROWS[row]}"
    return f"in the {ROWS[row]} {COLUMNS[column]}"


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def draw(canvas: ImageDraw.ImageDraw, kind: str, color: tuple[int, int, int], box: Box) -> Box:
    """Draw one object in the square `box`; returns the box of the pixels it covers."""
    x0, y0, x1, y1 = box
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    if kind == "cross":
        canvas.rectangle([cx - r, cy - r / 3, cx + r, cy + r / 3], fill=color)
        canvas.rectangle([cx - r / 3, cy - r, cx + r / 3, cy + r], fill=color)
    elif kind == "ring":
        canvas.ellipse([x0, y0, x1, y1], outline=color, width=3)
    elif kind == "bar":
        canvas.rectangle([x0, cy - r / 3, x1, cy + r / 3], fill=color)
        return x0, cy - r / 3, x1, cy + r / 3
    else:
        canvas.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=color)
    return box


def scene(rng: np.random.Generator) -> Scene:
    """One image, its five captions and the box of each object."""
    count = int(rng.integers(1, 4))
    cells = sorted(rng.choice(9, size=count, replace=False).tolist())  # reading order
    objects, boxes = [], []
    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    canvas = ImageDraw.Draw(image)
    for cell in cells:
        row, column = divmod(cell, 3)
        kind, color = KINDS[int(rng.integers(len(KINDS)))], list(COLORS)[int(rng.integers(len(COLORS)))]
        side = float(rng.uniform(12, 16))
        cx = (column + 0.5) * CELL + float(rng.uniform(-2, 2))
        cy = (row + 0.5) * CELL + float(rng.uniform(-2, 2))
        covered = draw(canvas, kind, COLORS[color], (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2))
        objects.append((kind, color, place(row, column)))
        boxes.append(ObjectBox(label=kind, box=covered))
    described = [f"{article(color)} {color} {kind} {where}" for kind, color, where in objects]
    captions = (
        " and ".join(described),
        "there is " + " and ".join(described),
        " and ".join(reversed(described)),
        " and ".join(f"the {kind} is {where}" for kind, _, where in objects),
        " and ".join(f"{article(color)} {color} {kind}" for kind, color, _ in objects),
    )
    return Scene(image, captions, tuple(boxes))


def generate(root: Path, *, splits: dict[str, int], seed: int = 0) -> SceneFiles:
    """The dataset under `root` (kept if there): e.g. splits {"train": 3000, "val": 200, "test": 200}."""
    return write_scenes(root, name=NAME, categories=KINDS, splits=splits, seed=seed, scene=scene)
