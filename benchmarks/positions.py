"""Soft against hard attention on a second synthetic dataset, in Karpathy's JSON format: other objects, other
layouts, and captions that name where each object is.

    python benchmarks/positions.py                      # generate data/positions, train soft then hard, score both
    python benchmarks/positions.py --generate-only      # just the dataset (PNG files + dataset_positions.json)

The data: 1 to 3 objects (cross, ring, bar, diamond; purple, orange, black, cyan) on a light 64×64 canvas, each in
its own cell of a 3×3 layout (top left ... bottom right) with a few pixels of jitter. Five captions per image,
objects in reading order, e.g. "a purple cross in the top left and an orange ring in the center"; one template
names no positions. Written as PNG files and `dataset_positions.json` (Karpathy's format: images[].filename,
split, imgid, sentences[].raw/tokens), read by `caption.data.karpathy.KarpathySource` like COCO or Flickr.

Both models use the shapes configs' settings (`shapes_soft`, then `shapes_hard` on the soft
run's frozen encoder) with the data swapped for this dataset (`DIR/data.yaml`) and room for its longer captions
(`model.decoding.max_caption_length` 24: three objects and their places take up to 22 words); each best checkpoint
(validation BLEU-4) then decodes the test split with beam 3 and is scored with the coco-caption metrics.
Writes DIR/positions.json and prints a table.
"""

import argparse
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

KINDS = ("cross", "ring", "bar", "diamond")
COLORS = {"purple": (128, 40, 160), "orange": (240, 130, 20), "black": (20, 20, 20), "cyan": (30, 190, 200)}
ROWS, COLUMNS = ("top", "middle", "bottom"), ("left", "center", "right")
BACKGROUND = (225, 222, 210)
SIZE, CELL = 64, 64 / 3


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


def draw(canvas: ImageDraw.ImageDraw, kind: str, color: tuple[int, int, int], box: tuple[float, ...]) -> None:
    x0, y0, x1, y1 = box
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    if kind == "cross":
        canvas.rectangle([cx - r, cy - r / 3, cx + r, cy + r / 3], fill=color)
        canvas.rectangle([cx - r / 3, cy - r, cx + r / 3, cy + r], fill=color)
    elif kind == "ring":
        canvas.ellipse([x0, y0, x1, y1], outline=color, width=3)
    elif kind == "bar":
        canvas.rectangle([x0, cy - r / 3, x1, cy + r / 3], fill=color)
    else:
        canvas.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=color)


def scene(rng: np.random.Generator) -> tuple[Image.Image, list[str]]:
    """One image and its five captions."""
    count = int(rng.integers(1, 4))
    cells = sorted(rng.choice(9, size=count, replace=False).tolist())  # reading order
    objects = []
    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    canvas = ImageDraw.Draw(image)
    for cell in cells:
        row, column = divmod(cell, 3)
        kind, color = KINDS[int(rng.integers(len(KINDS)))], list(COLORS)[int(rng.integers(len(COLORS)))]
        side = float(rng.uniform(12, 16))
        cx = (column + 0.5) * CELL + float(rng.uniform(-2, 2))
        cy = (row + 0.5) * CELL + float(rng.uniform(-2, 2))
        draw(canvas, kind, COLORS[color], (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2))
        objects.append((kind, color, place(row, column)))
    described = [f"{article(color)} {color} {kind} {where}" for kind, color, where in objects]
    captions = [
        " and ".join(described),
        "there is " + " and ".join(described),
        " and ".join(reversed(described)),
        " and ".join(f"the {kind} is {where}" for kind, _, where in objects),
        " and ".join(f"{article(color)} {color} {kind}" for kind, color, _ in objects),
    ]
    return image, captions


def generate(root: Path, *, splits: dict[str, int], seed: int = 0) -> Path:
    """PNG images under root/images and root/dataset_positions.json; returns the JSON's path (kept if present)."""
    annotations = root / "dataset_positions.json"
    if annotations.is_file():
        return annotations
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries = []
    for split, count in splits.items():
        for _ in range(count):
            imgid = len(entries)
            image, captions = scene(rng)
            filename = f"{imgid:05d}.png"
            image.save(root / "images" / filename)
            entries.append({"filename": filename, "imgid": imgid, "split": split,
                            "sentences": [{"raw": caption, "tokens": caption.split()} for caption in captions]})
    partial = annotations.with_suffix(".json.partial")
    partial.write_text(json.dumps({"images": entries, "dataset": "positions"}))
    partial.replace(annotations)  # the JSON last, whole: a half-written dataset is not mistaken for one
    return annotations


def data_config(annotations: Path, out: Path) -> Path:
    """The settings that swap the shapes data for this dataset (image files at 64×64, no crop; longer captions)."""
    path = out / "data.yaml"
    path.write_text(json.dumps({"model": {"max_caption_length": 24}, "data": {"source": {
        "class_path": "caption.data.karpathy.KarpathySource",
        "init_args": {"annotations": str(annotations), "images": str(annotations.parent / "images"),
                      "resize_size": SIZE, "crop_size": SIZE}}}}))
    return path


def fit(name: str, configs: list[str], overrides: list[str], out: Path) -> float:
    run = out / name
    command = [sys.executable, "-m", "caption.cli", "fit", *(f"--config={config}" for config in configs), *overrides,
               "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
               "--trainer.enable_progress_bar", "false"]
    started = time.perf_counter()
    with (out / f"{name}.log").open("w") as log:
        if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed; see {out / f'{name}.log'}")
    return time.perf_counter() - started


def score(run: Path) -> dict[str, float]:
    from caption.inference import Captioner, evaluate, training_data

    best = min(run.glob("checkpoints/best-*.ckpt"), key=lambda path: path.stat().st_mtime)
    captioner = Captioner.from_checkpoint(best, device="cpu")
    evaluation = evaluate(captioner, training_data(captioner), split="test", beam_size=3, description=run.name)
    return evaluation.scores | {"alpha_entropy": evaluation.alpha_entropy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data/positions"))
    parser.add_argument("--out", type=Path, default=Path("runs/positions"))
    parser.add_argument("--train", type=int, default=3000, help="training images (val and test: 200 each)")
    parser.add_argument("--generate-only", action="store_true")
    args = parser.parse_args()
    annotations = generate(args.data, splits={"train": args.train, "val": 200, "test": 200})
    if args.generate_only:
        print(f"wrote {annotations}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    data = str(data_config(annotations.resolve(), args.out))
    walls = {"soft": fit("soft", ["shapes_soft", data], [], args.out),
             "hard": fit("hard", ["shapes_hard", data],
                         ["--model.encoder.weights", str(args.out / "soft")], args.out)}
    results = {name: score(args.out / name) | {"wall_seconds": round(wall)} for name, wall in walls.items()}
    (args.out / "positions.json").write_text(json.dumps(results, indent=2))
    print(f"# positions benchmark, {date.today()}")
    print("| config | BLEU-1 | BLEU-4 | METEOR | CIDEr | α entropy | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in results.items():
        print(f"| {name} | {row['bleu1']:.3f} | {row['bleu4']:.3f} | {row['meteor']:.3f} | {row['cider']:.2f} "
              f"| {row['alpha_entropy']:.2f} | {row['wall_seconds']} |")
    print(f"hard − soft BLEU-4: {results['hard']['bleu4'] - results['soft']['bleu4']:+.3f}")


if __name__ == "__main__":
    main()
