"""The silhouettes dataset: 3 to 5 everyday things drawn as silhouettes on a 96×96 canvas, captions that name them and
how they lie.

Six categories (house, tree, car, boat, umbrella, table lamp; one may repeat), each a silhouette of a few polygons,
anywhere on the canvas without touching another, in a colour that no caption names: the category is told by the shape
alone. Five captions per image name the objects left to right (listed, counted or related). Written by `generate` as a
real dataset (`caption.data.synthetic.scene_files`) and read like COCO or Flickr by
`caption.data.sources.karpathy.KarpathySource`; benchmarks/silhouettes.py trains on it. The scenes and captions:
docs/datasets.md#generated-datasets-in-the-real-formats.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from caption.data.sources.coco_categories import plural
from caption.data.sources.records import ObjectBox
from caption.data.synthetic.scene_files import Scene, SceneFiles, write_scenes

NAME = "silhouettes"
CATEGORIES = ("house", "tree", "car", "boat", "umbrella", "table lamp")
SIZE = 96
READ_SIZE = 64  # read at: objects of 13 to 17 pixels, about what one annotation of the shapes encoder sees (18)
SIDES = (20, 26)  # object side in pixels (inclusive range)
GAP = 3  # empty pixels at least between two objects, and between an object and the border
PALETTE = ((170, 40, 40), (40, 120, 60), (40, 70, 170), (120, 60, 150), (30, 30, 30), (200, 110, 20),
           (20, 130, 140), (140, 90, 50))
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}
CAPTION_LENGTH = 24  # words: five objects and four relations take up to 21
MAX_PLACEMENT_TRIES = 200

def house(pen: ImageDraw.ImageDraw, at: Callable[[float, float], tuple[float, float]]) -> None:
    pen.polygon([at(0.1, 0.45), at(0.9, 0.45), at(0.9, 1.0), at(0.1, 1.0)], fill=255)  # walls
    pen.polygon([at(0.0, 0.5), at(0.5, 0.0), at(1.0, 0.5)], fill=255)  # roof
    pen.polygon([at(0.4, 0.7), at(0.6, 0.7), at(0.6, 1.0), at(0.4, 1.0)], fill=0)  # door


def tree(pen: ImageDraw.ImageDraw, at: Callable[[float, float], tuple[float, float]]) -> None:
    pen.ellipse([at(0.1, 0.0), at(0.9, 0.7)], fill=255)  # crown
    pen.polygon([at(0.4, 0.6), at(0.6, 0.6), at(0.6, 1.0), at(0.4, 1.0)], fill=255)  # trunk


def car(pen: ImageDraw.ImageDraw, at: Callable[[float, float], tuple[float, float]]) -> None:
    pen.polygon([at(0.0, 0.5), at(1.0, 0.5), at(1.0, 0.78), at(0.0, 0.78)], fill=255)  # body
    pen.polygon([at(0.22, 0.5), at(0.32, 0.2), at(0.68, 0.2), at(0.78, 0.5)], fill=255)  # cabin
    pen.polygon([at(0.36, 0.3), at(0.64, 0.3), at(0.64, 0.46), at(0.36, 0.46)], fill=0)  # window
    for x in (0.2, 0.8):  # wheels
        pen.ellipse([at(x - 0.14, 0.68), at(x + 0.14, 0.96)], fill=255)


def boat(pen: ImageDraw.ImageDraw, at: Callable[[float, float], tuple[float, float]]) -> None:
    pen.polygon([at(0.0, 0.72), at(1.0, 0.72), at(0.82, 0.95), at(0.18, 0.95)], fill=255)  # hull
    pen.polygon([at(0.52, 0.0), at(0.52, 0.6), at(0.95, 0.6)], fill=255)  # sail, clear of the hull
    pen.polygon([at(0.42, 0.0), at(0.52, 0.0), at(0.52, 0.72), at(0.42, 0.72)], fill=255)  # mast


def umbrella(pen: ImageDraw.ImageDraw, at: Callable[[float, float], tuple[float, float]]) -> None:
    pen.pieslice([at(0.0, 0.0), at(1.0, 0.9)], 180, 360, fill=255)  # canopy
    pen.polygon([at(0.45, 0.4), at(0.55, 0.4), at(0.55, 0.9), at(0.45, 0.9)], fill=255)  # shaft
    pen.polygon([at(0.25, 0.82), at(0.55, 0.82), at(0.55, 1.0), at(0.25, 1.0)], fill=255)  # handle
    pen.polygon([at(0.25, 0.7), at(0.33, 0.7), at(0.33, 1.0), at(0.25, 1.0)], fill=255)


def table_lamp(pen: ImageDraw.ImageDraw, at: Callable[[float, float], tuple[float, float]]) -> None:
    pen.polygon([at(0.3, 0.0), at(0.7, 0.0), at(0.95, 0.45), at(0.05, 0.45)], fill=255)  # shade
    pen.polygon([at(0.44, 0.45), at(0.56, 0.45), at(0.56, 0.85), at(0.44, 0.85)], fill=255)  # stem
    pen.polygon([at(0.2, 0.85), at(0.8, 0.85), at(0.8, 1.0), at(0.2, 1.0)], fill=255)  # foot


DRAW = {"house": house, "tree": tree, "car": car, "boat": boat, "umbrella": umbrella, "table lamp": table_lamp}


def silhouette(category: str, corner: tuple[float, float], side: float) -> Image.Image:
    """The mask (mode "L", the canvas's size) of one object drawn in the square of `side` at `corner`."""
    mask = Image.new("L", (SIZE, SIZE), 0)
    x0, y0 = corner
    DRAW[category](ImageDraw.Draw(mask), lambda u, v: (x0 + u * side, y0 + v * side))
    return mask


def placed(rng: np.random.Generator, count: int) -> list[tuple[float, float, float]] | None:
    """`count` squares (x0, y0, side) that keep `GAP` from each other and the border, or None where they don't fit."""
    squares: list[tuple[float, float, float]] = []
    for _ in range(MAX_PLACEMENT_TRIES):
        side = float(rng.integers(SIDES[0], SIDES[1] + 1))
        x0, y0 = (float(rng.uniform(GAP, SIZE - GAP - side)) for _ in range(2))
        if all(x0 + side + GAP <= x or x + s + GAP <= x0 or y0 + side + GAP <= y or y + s + GAP <= y0
               for x, y, s in squares):
            squares.append((x0, y0, side))
            if len(squares) == count:
                return squares
    return None


def named(category: str) -> str:
    return f"{'an' if category[0] in 'aeiou' else 'a'} {category}"


def listed(phrases: list[str]) -> str:
    """ "a house", "a car, a tree and a boat" """
    return phrases[0] if len(phrases) == 1 else f"{' , '.join(phrases[:-1])} and {phrases[-1]}"


def relation(a: ObjectBox, b: ObjectBox) -> str:
    """How `a` lies to `b`, where `a` is the one further left: "left of", or "above"/"below" where the vertical
    distance of their centres is the larger."""
    (ax, ay), (bx, by) = (((box.box[0] + box.box[2]) / 2, (box.box[1] + box.box[3]) / 2) for box in (a, b))
    if abs(by - ay) > abs(bx - ax):
        return "above" if ay < by else "below"
    return "left of"


def counted(categories: list[str]) -> str:
    """ "two houses and a car": each category once, in order of first appearance, with its count."""
    order = list(dict.fromkeys(categories))
    return listed([named(c) if categories.count(c) == 1 else f"{NUMBERS[categories.count(c)]} {plural(c)}"
                   for c in order])


def captions(objects: list[ObjectBox]) -> tuple[str, ...]:
    """Five captions of objects given left to right."""
    names = [named(obj.label) for obj in objects]
    pairs = [f"{names[i]} {relation(objects[i], objects[i + 1])} {names[i + 1]}" for i in range(0, len(objects) - 1, 2)]
    pairs += [names[-1]] if len(objects) % 2 else []
    centre = [(obj.box[1] + obj.box[3]) / 2 for obj in objects]
    top, bottom = objects[int(np.argmin(centre))], objects[int(np.argmax(centre))]
    return (
        f"{NUMBERS[len(objects)]} objects from left to right : {listed(names)}",
        listed(names),
        counted([obj.label for obj in objects]),
        " and ".join(pairs),
        f"{named(top.label)} at the top and {named(bottom.label)} at the bottom",
    )


def scene(rng: np.random.Generator) -> Scene:
    """One image, its five captions and the tight box of each object."""
    squares = None
    while squares is None:
        squares = placed(rng, int(rng.integers(3, 6)))
    background = tuple(int(value) for value in rng.integers(200, 246, size=3))
    image = Image.new("RGB", (SIZE, SIZE), background)
    objects = []
    for x0, y0, side in squares:
        category = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        mask = silhouette(category, (x0, y0), side)
        image.paste(PALETTE[int(rng.integers(len(PALETTE)))], mask=mask)
        objects.append(ObjectBox(label=category, box=tuple(float(value) for value in mask.getbbox())))
    objects.sort(key=lambda obj: (obj.box[0] + obj.box[2]) / 2)
    return Scene(image, captions(objects), tuple(objects))


def generate(root: Path, *, splits: dict[str, int], seed: int = 0) -> SceneFiles:
    """The dataset under `root` (kept if there): e.g. splits {"train": 3000, "val": 200, "test": 200}."""
    return write_scenes(root, name=NAME, categories=CATEGORIES, splits=splits, seed=seed, scene=scene)
