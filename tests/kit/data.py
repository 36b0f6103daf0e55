"""Data fixtures made on the fly: small image files of several modes, bad files, dataset files in the real formats
(Karpathy's dataset_*.json and COCO's official captions_*.json), and torchvision-format encoder weights with random
values (no download in tests)."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision import models

SPLIT_OF = {"train": 3, "restval": 2, "val": 2, "test": 2}  # images per Karpathy split in the small dataset


def gradient(size: tuple[int, int], seed: int) -> np.ndarray:
    """A smooth random-coloured (H, W, 3) uint8 picture (JPEG-friendly, different for every seed)."""
    width, height = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    channels = [rng.uniform(0, 255) * (1 - x) + rng.uniform(0, 255) * y * x + rng.uniform(0, 60) for _ in range(3)]
    return np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)


def write_image(path: Path, mode: str = "RGB", size: tuple[int, int] = (48, 40), seed: int = 0) -> Path:
    """Save a picture in the given Pillow mode; the format follows the suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rgb = Image.fromarray(gradient(size, seed))
    if mode == "I;16":
        image = Image.fromarray((np.asarray(rgb.convert("L"), dtype=np.uint16) * 257))
    elif mode == "P":
        image = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    else:
        image = rgb.convert(mode)
    image.save(path)
    return path


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims `width` x `height` pixels but holds almost no data (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def write_bad_files(folder: Path) -> dict[str, Path]:
    """One file of every kind of bad input, by name."""
    folder.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(0).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(folder / "good.jpg", quality=95)  # noise: the scan data dwarfs the header
    good = (folder / "good.jpg").read_bytes()
    files = {name: folder / f"{name}.jpg" for name in ("missing", "empty", "truncated", "text", "garbage")}
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(good[: len(good) // 2])
    files["text"].write_text("this is not an image\n")
    files["garbage"].write_bytes(good[:2] + bytes(range(256)) * 4)  # a JPEG start marker, then noise
    files["tiny"] = write_image(folder / "tiny.png", size=(1, 1))
    files["bomb"] = folder / "bomb.png"
    files["bomb"].write_bytes(png_header(100_000, 100_000))
    return files


def karpathy_dataset(root: Path, *, coco: bool = True, size: tuple[int, int] = (48, 40)) -> Path:
    """A Karpathy-format dataset with every field and split, its images written under root/images.

    Image k has 5 sentences "picture k number j ..."; the first train image also has an empty, a
    whitespace-only and a non-ASCII caption, and a long 30-word caption.
    """
    entries, imgid = [], 0
    for split, count in SPLIT_OF.items():
        for _ in range(count):
            folder = "val2014" if split in ("val", "test", "restval") else "train2014"
            filename = f"COCO_{folder}_{1000 + imgid:012d}.jpg" if coco else f"{1000 + imgid}.jpg"
            write_image(root / "images" / (folder if coco else "") / filename, size=size, seed=imgid)
            raws = [f"Picture {imgid} number {j}, a {split} photo." for j in range(5)]
            if imgid == 0:
                raws += ["", "   ", "Un café crème à Zürich", " ".join(["long"] * 30)]
            sentences = [
                {"tokens": raw.lower().split(), "raw": raw, "imgid": imgid, "sentid": 10 * imgid + j}
                for j, raw in enumerate(raws)
            ]
            entry = {"filename": filename, "imgid": imgid, "split": split, "sentences": sentences,
                     "sentids": [s["sentid"] for s in sentences]}
            if coco:
                entry.update(filepath=folder, cocoid=1000 + imgid)
            entries.append(entry)
            imgid += 1
    path = root / ("dataset_coco.json" if coco else "dataset_flickr8k.json")
    path.write_text(json.dumps({"images": entries, "dataset": "coco" if coco else "flickr8k"}), encoding="utf-8")
    return path


LONE_SURROGATE_CAPTIONS = {"val": 1, "test": 2}  # split -> the caption of its first image given a lone surrogate


def with_lone_surrogates(annotations: Path) -> list[tuple[int, int, int]]:
    """Karpathy-format `annotations` rewritten with a lone UTF-16 surrogate ("\\ud800", a valid JSON escape) in a
    caption of the first val and the first test image (LONE_SURROGATE_CAPTIONS). Returns (entry index, sentence
    index, image id) of each, in the file's order."""
    data = json.loads(annotations.read_text(encoding="utf-8"))
    changed = []
    for split, sentence in LONE_SURROGATE_CAPTIONS.items():
        index, entry = next((k, entry) for k, entry in enumerate(data["images"]) if entry["split"] == split)
        entry["sentences"][sentence]["raw"] = f"A broken \ud800 word in a {split} caption."
        changed.append((index, sentence, entry.get("cocoid", entry["imgid"])))
    annotations.write_text(json.dumps(data), encoding="ascii")  # the surrogate as its JSON escape
    return changed


def coco_official(root: Path, karpathy: Path) -> tuple[list[Path], list[Path]]:
    """COCO's captions_train2014.json / captions_val2014.json holding the same images and captions."""
    data = json.loads(karpathy.read_text(encoding="utf-8"))
    annotations, folders = [], []
    for folder in ("train2014", "val2014"):
        entries = [entry for entry in data["images"] if entry["filepath"] == folder]
        content = {
            "info": {}, "licenses": [],
            "images": [{"id": e["cocoid"], "file_name": e["filename"], "width": 48, "height": 40} for e in entries],
            "annotations": [
                {"id": s["sentid"], "image_id": e["cocoid"], "caption": s["raw"]}
                for e in entries
                for s in e["sentences"]
            ],
        }
        path = root / "annotations" / f"captions_{folder}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content), encoding="utf-8")
        annotations.append(path)
        folders.append(root / "images" / folder)
    return annotations, folders


RESNETS = {"resnet50": models.resnet50, "resnet101": models.resnet101, "resnet152": models.resnet152}


def resnet_weights(path: Path, *, name: str = "resnet50", seed: int = 0) -> Path:
    """torchvision's own random initialisation of `name`, fc included, as `torch.save(model.state_dict())` writes it.

    The BatchNorm statistics are measured on random smooth 64x64 images (like the fixtures' pictures), as
    training would measure them on its data:
    in eval mode the activations then keep a trained network's scale (with torchvision's initial statistics,
    0 and 1, they grow to hundreds by layer4, which saturates the decoder's tanh and sigmoid layers so that no
    gradient reaches the encoder). They also differ from the initial ones, so a test notices if they are not loaded.
    """
    torch.manual_seed(seed)
    resnet = RESNETS[name]()
    for module in resnet.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # a cumulative average over the batches below
    smooth = torch.nn.functional.interpolate(torch.randn(16, 3, 4, 4), size=(64, 64), mode="bilinear")
    with torch.no_grad():
        resnet.train()(smooth)
    torch.save(resnet.state_dict(), path)
    return path


def vgg16_weights(path: Path, *, full: bool = False, seed: int = 0) -> Path:
    """A torchvision-format VGG16 state dict with random conv weights.

    `full` adds the classifier's keys with their real shapes, stored as stride-0 views of a single
    number so that the file stays at the features' 59 MB rather than 528 MB.
    """
    torch.manual_seed(seed)
    features = models.vgg.make_layers(models.vgg.cfgs["D"])
    for layer in features:
        if isinstance(layer, torch.nn.Conv2d):  # torchvision's VGG initialisation: activations keep their scale
            torch.nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
            torch.nn.init.normal_(layer.bias, std=0.01)
    state = {f"features.{key}": value for key, value in features.state_dict().items()}
    if full:
        for index, (outputs, inputs) in {0: (4096, 25088), 3: (4096, 4096), 6: (1000, 4096)}.items():
            state[f"classifier.{index}.weight"] = torch.full((1,), 0.01).expand(outputs, inputs)
            state[f"classifier.{index}.bias"] = torch.zeros(1).expand(outputs)
    torch.save(state, path)
    return path


def coco_instances(root: Path, karpathy: Path, *, size: tuple[int, int] = (48, 40),
                   names: tuple[str, str] = ("person", "dog")) -> list[Path]:
    """COCO's instances_train2014.json / instances_val2014.json for the images of a `karpathy_dataset` (each
    `size` = (width, height)): every image holds a person (its left half, [0, 0, w/2, h]) and a dog (a box in its
    bottom-right quarter); the last val2014 image is listed with no annotation, as some COCO images are. `names`:
    the two categories' names, COCO's or made up."""
    data = json.loads(karpathy.read_text(encoding="utf-8"))
    width, height = size
    categories = [{"id": 1, "name": names[0], "supercategory": "thing"},
                  {"id": 18, "name": names[1], "supercategory": "thing"}]
    paths = []
    for folder in ("train2014", "val2014"):
        entries = [entry for entry in data["images"] if entry["filepath"] == folder]
        annotated = entries[:-1] if folder == "val2014" else entries
        boxes = [(1, [0, 0, width / 2, height]), (18, [width * 3 / 4, height * 3 / 4, width / 8, height / 8])]
        content = {
            "info": {}, "licenses": [], "categories": categories,
            "images": [{"id": e["cocoid"], "file_name": e["filename"], "width": width, "height": height}
                       for e in entries],
            "annotations": [
                {"id": 10 * e["cocoid"] + k, "image_id": e["cocoid"], "category_id": category, "bbox": bbox,
                 "iscrowd": 0, "area": bbox[2] * bbox[3], "segmentation": []}
                for e in annotated for k, (category, bbox) in enumerate(boxes)
            ],
        }
        path = root / "annotations" / f"instances_{folder}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content), encoding="utf-8")
        paths.append(path)
    return paths
