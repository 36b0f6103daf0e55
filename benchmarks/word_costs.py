"""What a trained model has learned of each kind of word: teacher-forced on a generated dataset's training images, the
mean NLL of each class of word (nats) and where α peaks at those words (inside an object's box, or on the canvas's
edge row or column). The figures of docs/measurements.md, "Stage 1 on data it was not made for":

    python benchmarks/word_costs.py runs/positions/soft/checkpoints/last.ckpt data/positions \\
        --classes kind=cross,ring,bar,diamond colour=purple,orange,black,cyan place=top,bottom,left,right,center,middle

The dataset folder is one `caption.data.synthetic.scene_files` writes (dataset_<name>.json, instances_<name>.json,
images/).
"""

import argparse
import json
from pathlib import Path

import torch
from PIL import Image

from caption.inference import Captioner


def word_costs(checkpoint: Path, root: Path, classes: dict[str, set[str]], *, images: int) -> dict[str, dict]:
    """{class: {words, nll, peak_in_box, peak_on_edge}} over every reference of the first `images` training images."""
    captioner = Captioner.from_checkpoint(checkpoint, device="cpu")
    module, vocabulary = captioner.module.eval(), captioner.module.vocabulary
    dataset = json.loads(next(root.glob("dataset_*.json")).read_text())
    boxes: dict[int, list[tuple[float, float, float, float]]] = {}
    for found in json.loads(next(root.glob("instances_*.json")).read_text())["annotations"]:
        x, y, width, height = found["bbox"]
        boxes.setdefault(found["image_id"], []).append((x, y, x + width, y + height))
    totals = {name: [0, 0.0, 0, 0] for name in classes}  # words, NLL, peaks in a box, peaks on the edge
    with torch.no_grad():
        for entry in [entry for entry in dataset["images"] if entry["split"] == "train"][:images]:
            pixels = captioner.prepare(Image.open(root / "images" / entry["filename"]))[None]  # (1, 3, H, W)
            annotations = module.encoder(pixels)  # (1, L, D)
            grid, (height, width) = int(annotations.shape[1] ** 0.5), pixels.shape[-2:]
            for sentence in entry["sentences"]:
                ids = torch.tensor([vocabulary.encode(sentence["tokens"])])  # (1, T+1)
                output = module.decoder(annotations, ids)
                nll = -output.logits[0].log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]  # (T,)
                for word, cost, alpha in zip(sentence["tokens"], nll.tolist(), output.alpha[0]):
                    name = next((name for name, words in classes.items() if word in words), None)
                    if name is None:
                        continue
                    row, column = divmod(int(alpha.argmax()), grid)
                    x, y = (column + 0.5) * width / grid, (row + 0.5) * height / grid
                    tally = totals[name]
                    tally[0] += 1
                    tally[1] += cost
                    tally[2] += any(x0 <= x <= x1 and y0 <= y <= y1 for x0, y0, x1, y1 in boxes.get(entry["imgid"], []))
                    tally[3] += row in (0, grid - 1) or column in (0, grid - 1)
    return {name: {"words": count, "nll": round(cost / count, 3), "peak_in_box": round(inside / count, 2),
                   "peak_on_edge": round(edge / count, 2)}
            for name, (count, cost, inside, edge) in totals.items() if count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("data", type=Path, help="a generated dataset's folder")
    parser.add_argument("--classes", nargs="+", required=True, help="name=word,word,... for each class of word")
    parser.add_argument("--images", type=int, default=60, help="the first N training images")
    args = parser.parse_args()
    classes = {name: set(words.split(",")) for name, words in (item.split("=", 1) for item in args.classes)}
    print(json.dumps(word_costs(args.checkpoint, args.data, classes, images=args.images), indent=2))


if __name__ == "__main__":
    main()
