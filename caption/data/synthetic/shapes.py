"""The built-in synthetic dataset: coloured shapes on a plain canvas.

Each image holds (by default) two objects of different kinds, e.g. a large red circle and a small blue square, placed
so that their spatial relation is unambiguous, and five reference captions from varied templates, one always the
canonical "a large red circle left of a small blue square" (sizes, colours, kinds and the relation, left/top object
first): a model that reads the scene can reach BLEU-4 close to 1, and only by looking at each object. Generated from a
seed, no download: the same parameters always give byte-identical images and captions. More:
docs/datasets.md#the-built-in-data.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw

from caption.data.sources.base import CaptionSource
from caption.data.sources.records import ImageRecord, ObjectBox
from caption.errors import ConfigError
from caption.io.outputs import write_atomically, write_json

log = logging.getLogger(__name__)

KINDS = ("circle", "square", "triangle")
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 50, 47),
    "green": (60, 180, 75),
    "blue": (50, 100, 230),
    "yellow": (240, 210, 40),
}
BACKGROUND = (32, 32, 32)
PIXEL_MEAN, PIXEL_STD = 0.5, 0.25  # ShapesSource.image: (pixels / 255 - mean) / std, roughly unit variance
# Object side lengths in pixels for a 64x64 canvas (inclusive range); scaled with image_size.
SIDES = {"small": (10, 13), "large": (18, 22)}
MARGIN = 6  # the dominant centre offset must exceed the other by this many pixels (at 64x64)
GAP = 2  # minimum empty pixels between two boxes, and between a box and the border (at 64x64)
NUM_REFERENCES = 5
MAX_PLACEMENT_TRIES = 1000
CACHE_VERSION = 1  # bump whenever generation changes, to invalidate old caches


@dataclass(frozen=True)
class ShapeObject(ObjectBox):
    """One ground-truth object of a synthetic scene: its kind is its label (each kind names itself in the
    captions), its box is in the pixels of the canvas, the encoder's input."""

    color: str  # colour name, e.g. "red"
    size: str  # "small" | "large"

    @property
    def kind(self) -> str:
        """"circle" | "square" | "triangle": the label."""
        return self.label

    @property
    def center(self) -> tuple[float, float]:
        """The (x, y) centre of the box in pixel coordinates."""
        x0, y0, x1, y1 = self.box
        return (x0 + x1) / 2, (y0 + y1) / 2

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the cache's format)."""
        return {"kind": self.kind, "color": self.color, "size": self.size, "box": list(self.box)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShapeObject:
        """Inverse of :meth:`to_dict`."""
        x0, y0, x1, y1 = (int(v) for v in data["box"])
        return cls(label=str(data["kind"]), box=(x0, y0, x1, y1), color=str(data["color"]), size=str(data["size"]))


def object_for_word(objects: Sequence[ObjectBox], word: str) -> ObjectBox | None:
    """The object whose kind is ``word`` (kinds are unique within an image), or None."""
    return next((obj for obj in objects if obj.label == word), None)

# Templates are str.format strings over two objects `a` (left/top) and `b`, with
# `rel` in {"left of", "above"}, `inv` its inverse and `rel_long` a wordier form.
# The first template of each tuple is the canonical one, always among the references.
PAIR_TEMPLATES = (
    "a {a.size} {a.color} {a.kind} {rel} a {b.size} {b.color} {b.kind}",
    "a {b.size} {b.color} {b.kind} is {inv} a {a.size} {a.color} {a.kind}",
    "there is a {a.size} {a.color} {a.kind} and a {b.size} {b.color} {b.kind}",
    "a {a.color} {a.kind} is {rel_long} a {b.color} {b.kind}",
    "a {a.size} {a.color} {a.kind} and a {b.size} {b.color} {b.kind}",
    "the {b.kind} is {inv} the {a.kind}",
    "the {a.color} {a.kind} is {rel} the {b.color} {b.kind}",
    "a {b.size} {b.kind} {inv} a {a.size} {a.kind}",
)
SINGLE_TEMPLATES = (
    "a {a.size} {a.color} {a.kind}",
    "there is a {a.size} {a.color} {a.kind}",
    "a {a.color} {a.kind}",
    "a {a.size} {a.kind}",
    "the {a.kind} is {a.color}",
    "a single {a.size} {a.color} {a.kind}",
)
# The generic form some references take, as COCO's do ("a group of people ..."): it names the kinds, in the order of
# their names, not where each is, nor its colour or size, so a model can say it without looking at either object
GENERIC_TEMPLATES = {1: "one shape a {kinds[0]}", 2: "two shapes a {kinds[0]} and a {kinds[1]}"}
# The kinds in a colour no training or validation image shows them in when the test split is held out
# (`ShapesSource(held_out_test=True)`): each test image shows at least one of them
HELD_OUT_PAIRS = frozenset({("circle", "yellow"), ("square", "green"), ("triangle", "blue")})
_INVERSE = {"left of": "right of", "above": "below"}
_LONG = {"left of": "to the left of", "above": "above"}


def relation(a: ShapeObject, b: ShapeObject, margin: float = MARGIN) -> str | None:
    """Where ``a`` is relative to ``b``: "left of", "right of", "above", "below" or None if ambiguous.

    The relation is horizontal if the centres differ along x by more than
    ``margin`` pixels beyond their difference along y, vertical in the
    symmetric case, and ambiguous otherwise. Image y grows downwards.
    """
    (ax, ay), (bx, by) = a.center, b.center
    dx, dy = bx - ax, by - ay
    if abs(dx) > abs(dy) + margin:
        return "left of" if dx > 0 else "right of"
    if abs(dy) > abs(dx) + margin:
        return "above" if dy > 0 else "below"
    return None


def canonical_order(a: ShapeObject, b: ShapeObject) -> tuple[ShapeObject, ShapeObject, str]:
    """Order two objects left/top first and return them with their relation ("left of" or "above")."""
    rel = relation(a, b)
    if rel is None:
        raise ValueError(f"ambiguous relation between {a} and {b}")
    if rel in _INVERSE:
        return a, b, rel
    return b, a, {"right of": "left of", "below": "above"}[rel]


def make_references(objects: Sequence[ShapeObject], rng: np.random.Generator, *,
                    generic: bool = False) -> tuple[str, ...]:
    """Five distinct captions: the canonical one plus four other templates, in shuffled order; `generic`: one of the
    four is always the generic form (`GENERIC_TEMPLATES`)."""
    if len(objects) == 1:
        templates, fields = SINGLE_TEMPLATES, {"a": objects[0]}
    elif len(objects) == 2:
        a, b, rel = canonical_order(*objects)
        templates, fields = PAIR_TEMPLATES, {"a": a, "b": b, "rel": rel, "inv": _INVERSE[rel], "rel_long": _LONG[rel]}
    else:
        raise ValueError(f"captions are defined for 1 or 2 objects, got {len(objects)}")
    if generic:
        templates = (templates[0], GENERIC_TEMPLATES[len(objects)], *templates[1:])
        fields["kinds"] = sorted(obj.kind for obj in objects)
    always = 1 + generic  # the canonical template, and the generic one
    others = always + rng.choice(len(templates) - always, size=NUM_REFERENCES - always, replace=False)
    chosen = [*templates[:always], *(templates[i] for i in others)]
    return tuple(chosen[i].format(**fields) for i in rng.permutation(NUM_REFERENCES))


def _boxes_apart(p: tuple[int, int, int, int], q: tuple[int, int, int, int], gap: int) -> bool:
    """Whether two boxes are separated by at least ``gap`` empty pixels along some axis."""
    return p[2] + gap <= q[0] or q[2] + gap <= p[0] or p[3] + gap <= q[1] or q[3] + gap <= p[1]


def _sample_objects(rng: np.random.Generator, image_size: int, num_objects: tuple[int, int],
                    held_out: bool | None = None) -> list[ShapeObject]:
    """Sample kinds, colours, sizes and non-overlapping, unambiguously related positions. `held_out`: None, any
    colour; False, no kind in a colour of `HELD_OUT_PAIRS`; True, at least one (the colours drawn again until so)."""
    scale = image_size / 64
    gap, margin = max(1, round(GAP * scale)), MARGIN * scale
    n = int(rng.integers(num_objects[0], num_objects[1] + 1))
    kinds = [KINDS[i] for i in rng.permutation(len(KINDS))[:n]]
    colors = [list(COLORS)[i] for i in rng.integers(len(COLORS), size=n)]
    while held_out is not None and any(pair in HELD_OUT_PAIRS for pair in zip(kinds, colors)) != held_out:
        colors = [list(COLORS)[i] for i in rng.integers(len(COLORS), size=n)]
    sizes = [list(SIDES)[i] for i in rng.integers(len(SIDES), size=n)]
    sides = [int(rng.integers(round(SIDES[s][0] * scale), round(SIDES[s][1] * scale) + 1)) for s in sizes]
    for _ in range(MAX_PLACEMENT_TRIES):
        objects = []
        for kind, color, size, side in zip(kinds, colors, sizes, sides):
            x0, y0 = (int(v) for v in rng.integers(gap, image_size - side - gap + 1, size=2))
            objects.append(ShapeObject(label=kind, box=(x0, y0, x0 + side, y0 + side), color=color, size=size))
        pairs = [(p, q) for i, p in enumerate(objects) for q in objects[i + 1 :]]
        if all(_boxes_apart(p.box, q.box, gap) and relation(p, q, margin) is not None for p, q in pairs):
            return objects
    raise RuntimeError(f"could not place {n} objects on a {image_size}x{image_size} canvas")


def draw_scene(objects: Sequence[ShapeObject], image_size: int) -> np.ndarray:
    """Render filled shapes on the plain background as a uint8 (H, W, 3) array."""
    image = Image.new("RGB", (image_size, image_size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for obj in objects:
        x0, y0, x1, y1 = obj.box
        fill = COLORS[obj.color]
        if obj.kind == "circle":
            draw.ellipse((x0, y0, x1 - 1, y1 - 1), fill=fill)
        elif obj.kind == "square":
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=fill)
        elif obj.kind == "triangle":
            draw.polygon([((x0 + x1 - 1) / 2, y0), (x0, y1 - 1), (x1 - 1, y1 - 1)], fill=fill)
        else:
            raise ValueError(f"unknown shape kind {obj.kind!r}")
    return np.asarray(image, dtype=np.uint8)


def _check_params(image_size: int, num_objects: tuple[int, int], seed: int) -> None:
    lo, hi = num_objects
    if not 1 <= lo <= hi <= 2:
        raise ConfigError(f"num_objects must satisfy 1 <= min <= max <= 2, got {num_objects}")
    if image_size < 32:
        raise ConfigError(f"image_size must be >= 32, got {image_size}")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")


def generate_shapes(
    num_images: int,
    seed: int,
    image_size: int = 64,
    num_objects: tuple[int, int] = (2, 2),
    split: str = "train",
    first_image_id: int = 0,
    generic: bool = False,
    held_out: bool | None = None,
) -> tuple[np.ndarray, list[ImageRecord]]:
    """Generate ``num_images`` scenes and their records.

    Returns uint8 images of shape (N, H, W, 3) and one :class:`ImageRecord` per
    image (ids ``first_image_id, first_image_id + 1, ...``) whose ``objects``
    are in canonical (left/top first) order. Image ``i`` depends only on
    ``(seed, i)`` and the scene parameters, so the output is deterministic and
    a smaller ``num_images`` gives a prefix of a larger one.

    ``num_objects`` is the inclusive (min, max) number of objects per image; at
    most 2, since captions describe a single pairwise relation. ``generic``: one
    reference of each image is the generic form (`make_references`);
    ``held_out``: the colours of `HELD_OUT_PAIRS` never (False) or always (True)
    shown on their kind (`_sample_objects`).
    """
    _check_params(image_size, num_objects, seed)
    images = np.empty((num_images, image_size, image_size, 3), dtype=np.uint8)
    records = []
    for i in range(num_images):
        rng = np.random.default_rng([seed, i])
        objects = _sample_objects(rng, image_size, num_objects, held_out)
        if len(objects) == 2:
            objects = list(canonical_order(*objects)[:2])
        images[i] = draw_scene(objects, image_size)
        references = make_references(objects, rng, generic=generic)
        records.append(ImageRecord(first_image_id + i, split, references, objects=tuple(objects)))
    return images, records


def _atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """Write a file in memory, then with `caption.io.outputs.write_atomically`: readers never see a partial file."""
    buffer = io.BytesIO()
    write(buffer)
    write_atomically(path, buffer.getbuffer())


def _read_cache(directory: Path, params: dict[str, Any]) -> tuple[np.ndarray, list[ImageRecord]]:
    """Load a cache written by :func:`load_shapes`; raises if it is missing, corrupt or stale."""
    data = json.loads((directory / "records.json").read_text(encoding="utf-8"))
    if data["params"] != params:
        raise ValueError("cache parameters do not match")
    records = [ImageRecord.from_dict(r, read_object=ShapeObject.from_dict) for r in data["records"]]
    images = np.load(directory / "images.npy", allow_pickle=False)
    size = params["image_size"]
    if images.dtype != np.uint8 or images.shape != (len(records), size, size, 3):
        raise ValueError(f"cached images have dtype {images.dtype} and shape {images.shape}")
    return images, records


def load_shapes(
    root: str | Path = "data/shapes",
    num_train: int = 3000,
    num_val: int = 200,
    num_test: int = 200,
    seed: int = 0,
    image_size: int = 64,
    num_objects: tuple[int, int] = (2, 2),
    generic_references: bool = False,
    held_out_test: bool = False,
) -> tuple[np.ndarray, list[ImageRecord]]:
    """The train, val and test splits of the synthetic dataset, cached on disk.

    Returns all images concatenated in split order (train, val, test) with
    ``records[i]`` describing ``images[i]``; image ids are unique across splits.
    Each split uses its own seed derived from ``seed``. The result is cached
    under ``root/<hash of the parameters>/`` as ``images.npy`` and
    ``records.json``; a present, readable cache is reused and an unreadable
    one is regenerated.
    """
    _check_params(image_size, num_objects, seed)
    params = {
        "version": CACHE_VERSION,
        "num_train": num_train,
        "num_val": num_val,
        "num_test": num_test,
        "seed": seed,
        "image_size": image_size,
        "num_objects": list(num_objects),
        # set only when asked for: the default data keeps its cache
        **({"generic_references": True} if generic_references else {}),
        **({"held_out_test": True} if held_out_test else {}),
    }
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    directory = Path(root) / key
    try:
        return _read_cache(directory, params)
    except FileNotFoundError:
        log.info("generating shapes dataset in %s", directory)
    except (OSError, EOFError, ValueError, KeyError, TypeError) as error:
        log.warning("regenerating unreadable shapes cache %s: %s", directory, error)

    all_images, all_records = [], []
    for k, (split, count) in enumerate((("train", num_train), ("val", num_val), ("test", num_test))):
        split_seed = int(np.random.SeedSequence([seed, k]).generate_state(1)[0])
        held_out = (split == "test") if held_out_test else None
        images, records = generate_shapes(count, split_seed, image_size, num_objects, split, len(all_records),
                                          generic=generic_references, held_out=held_out)
        all_images.append(images)
        all_records.extend(records)
    images = np.concatenate(all_images)

    directory.mkdir(parents=True, exist_ok=True)
    payload = {"params": params, "records": [r.to_dict() for r in all_records]}
    # records.json is written last: a cache without it is incomplete and gets regenerated.
    _atomic_write(directory / "images.npy", lambda f: np.save(f, images, allow_pickle=False))
    _atomic_write(directory / "records.json", lambda f: f.write(json.dumps(payload).encode("utf-8")))
    return images, all_records


def write_split_images(out: str | Path, *, split: str = "test", count: int | None = None,
                       **settings: Any) -> list[Path]:
    """Write the images of one split of the built-in data as PNG files, to caption them as any image file
    (`caption describe --ckpt_path runs/shapes_soft test_images/`), and their reference captions beside them.

        python -c "from caption.data.synthetic.shapes import write_split_images; write_split_images('test_images')"

    out: the folder they are written to, as `shapes-<image id>.png`, with `references.json` ({file name: the
        image's reference captions}); made if missing
    split: "train", "val" or "test"
    count: the first this many images of the split (None: all of them)
    settings: the data's settings as `load_shapes` takes them (the configs' defaults when none: data/shapes in this
        folder, 3,000 / 200 / 200 images, seed 0), e.g. root="data/shapes"
    Returns the files written, in the split's order."""
    if split not in ("train", "val", "test"):
        raise ConfigError(f"split {split!r}: the built-in data's splits are train, val and test")
    if count is not None and count < 1:
        raise ConfigError(f"count {count}: give how many images to write (1 or more), or None for all")
    images, records = load_shapes(**settings)
    chosen = [(pixels, record) for pixels, record in zip(images, records, strict=True) if record.split == split]
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    files, references = [], {}
    for pixels, record in chosen[:count]:
        encoded = io.BytesIO()
        Image.fromarray(pixels).save(encoded, format="PNG")
        files.append(folder / f"shapes-{record.image_id}.png")
        write_atomically(files[-1], encoded.getbuffer(), what="image")
        references[files[-1].name] = list(record.references)
    write_json(folder / "references.json", references)
    return files


class ShapesSource(CaptionSource):
    """The built-in data as a `CaptionSource`: generated (or read from the cache) on first use.

    Args:
        root: cache folder.
        num_train: training images (five captions each).
        num_val: validation images.
        num_test: test images.
        seed: generation seed; the same seed always gives the same data.
        image_size: canvas side in pixels.
        generic_references: one reference per image is the generic form "two shapes a circle and a square", as
            COCO's references hold generic ones beside the specific.
        held_out_test: the test images unlike the training ones: each shows a kind in a colour no training or
            validation image shows it in (`HELD_OUT_PAIRS`).
    """

    path_arguments = ("root",)
    size_arguments = ("image_size",)

    def __init__(
        self,
        *,
        root: str = "data/shapes",
        num_train: int = 3000,
        num_val: int = 200,
        num_test: int = 200,
        seed: int = 0,
        image_size: int = 64,
        generic_references: bool = False,
        held_out_test: bool = False,
    ):
        self.params = dict(
            root=root, num_train=num_train, num_val=num_val, num_test=num_test, seed=seed, image_size=image_size,
            generic_references=generic_references, held_out_test=held_out_test,
        )
        self._images: np.ndarray | None = None
        self._records: list[ImageRecord] = []
        self._rows: dict[int, int] = {}

    def _load(self) -> None:
        if self._images is None:
            self._images, self._records = load_shapes(**self.params)
            self._rows = {record.image_id: row for row, record in enumerate(self._records)}

    @property
    def image_size(self) -> tuple[int, int]:
        return self.params["image_size"], self.params["image_size"]

    @property
    def word_labels(self) -> dict[str, str]:
        """Each kind names itself (the boxes are already in the encoder input's frame)."""
        return {kind: kind for kind in KINDS}

    def records(self) -> list[ImageRecord]:
        self._load()
        return self._records

    def image(self, record: ImageRecord) -> torch.Tensor:
        self._load()
        pixels = torch.from_numpy(self._images[self._rows[record.image_id]])  # (H, W, 3) uint8
        return (pixels.permute(2, 0, 1).float() / 255.0 - PIXEL_MEAN) / PIXEL_STD  # (3, H, W)

    def inference_transform(self) -> Callable[[Image.Image], torch.Tensor]:
        """Resized (bilinear) to the canvas size, then normalised as the generated images are."""
        height, width = self.image_size

        def transform(image: Image.Image) -> torch.Tensor:
            resized = image.resize((width, height), Image.Resampling.BILINEAR)
            pixels = torch.from_numpy(np.asarray(resized, dtype=np.uint8).copy())  # (H, W, 3)
            return (pixels.permute(2, 0, 1).float() / 255.0 - PIXEL_MEAN) / PIXEL_STD  # (3, H, W)

        return transform

    @property
    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return (PIXEL_MEAN,) * 3, (PIXEL_STD,) * 3
