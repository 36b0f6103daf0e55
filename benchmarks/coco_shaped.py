"""A COCO-shaped dataset without COCO: Karpathy-format JSON at COCO's split sizes, JPEGs, VGG16-format weights and a
full feature cache written through the project's own cache writer, for `benchmarks/coco_rehearsal.py`.

    python benchmarks/coco_shaped.py --scale 1/16 --out data/rehearsal/1-16

At --scale 1: 113,287 training images (82,783 train + 30,504 restval) / 5,000 val / 5,000 test, 5 captions per image
(0.3% with 6 or 7: 616,767 in all, as COCO), lengths spread like COCO's (`benchmarks/_helpers.py`), words drawn
from a Zipf law over 30,000 words whose exponent leaves about 10,000 of them at least 5 times in the training
captions (what `min_count: 5` keeps). Written under --out:

    dataset_coco.json      every image (real COCO file names, cocoids from 1)
    images/                the first --full_size_images training images as 640x480 JPEGs, the others one small JPEG
                           hard-linked (the cache writer decodes them; the feature stage is timed on the big ones)
    features_subset.json   those big images alone, for timing `caption features`
    vgg16_features.pth     a torchvision-format VGG16 (random `features.*` weights: no download)
    features/              the cache for dataset_coco.json: 196x512 float16 annotations per image, random (ReLU'd
                           normal) but written by `caption.data.features.build_cache`, so training reads a real
                           memory-mapped file of the real size
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
from _helpers import coco_like_words
from PIL import Image
from torch import Tensor, nn

COCO_SPLITS = {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}
COCO_CAPTIONS = 616_767
WORDS = 30_000
ZIPF_EXPONENT = 1.4  # leaves ~10,000 words at >= 5 occurrences in COCO's ~6.2M training tokens (1/16: ~1,400)
FULL_SIZE = (640, 480)


def split_sizes(scale: Fraction) -> dict[str, int]:
    return {split: max(1, round(count * scale)) for split, count in COCO_SPLITS.items()}


def captions_per_image(images: int, rng: np.random.Generator) -> np.ndarray:
    """5 per image, and COCO's few extra (6 or 7) spread over random images."""
    counts = np.full(images, 5)
    extra = round((COCO_CAPTIONS - 5 * sum(COCO_SPLITS.values())) * images / sum(COCO_SPLITS.values()))
    chosen = rng.choice(images, size=min(extra, images), replace=False)
    counts[chosen] += rng.choice([1, 1, 1, 2], size=len(chosen))
    return counts


def dataset(scale: Fraction, seed: int = 0) -> dict:
    """The Karpathy-format dataset at `scale` of COCO's size."""
    rng = np.random.default_rng(seed)
    sizes = split_sizes(scale)
    splits = [split for split, count in sizes.items() for _ in range(count)]
    counts = captions_per_image(len(splits), rng)
    lengths = coco_like_words(int(counts.sum()), seed=seed)
    ranks = np.arange(1, WORDS + 1)
    probabilities = ranks ** -ZIPF_EXPONENT / (ranks ** -ZIPF_EXPONENT).sum()
    words = rng.choice(WORDS, size=int(lengths.sum()), p=probabilities)
    vocabulary = [f"w{index}" for index in range(WORDS)]
    ends = np.cumsum(lengths)
    images, caption = [], 0
    for index, (split, count) in enumerate(zip(splits, counts)):
        folder = "train2014" if split == "train" else "val2014"
        sentences = []
        for _ in range(count):
            tokens = [vocabulary[word] for word in words[ends[caption] - lengths[caption] : ends[caption]]]
            sentences.append({"tokens": tokens, "raw": " ".join(tokens).capitalize() + "."})
            caption += 1
        images.append({"filepath": folder, "filename": f"COCO_{folder}_{index + 1:012d}.jpg", "split": split,
                       "sentences": sentences, "imgid": index, "cocoid": index + 1})
    return {"images": images, "dataset": "coco"}


def write_images(data: dict, root: Path, *, full_size_images: int, seed: int = 0) -> list[dict]:
    """Every image file of `data` under `root`; the first `full_size_images` training ones 640x480. Returns them."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    small_pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    linked = 0
    big = [entry for entry in data["images"] if entry["split"] in ("train", "restval")][:full_size_images]
    big_names = {entry["filename"] for entry in big}
    for entry in data["images"]:
        path = root / entry["filepath"] / entry["filename"]
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            continue
        if entry["filename"] in big_names:  # smooth noise compresses like a photo (~100 KB), not like white noise
            coarse = rng.integers(0, 256, (FULL_SIZE[1] // 8, FULL_SIZE[0] // 8, 3), dtype=np.uint8)
            Image.fromarray(coarse).resize(FULL_SIZE, Image.BILINEAR).save(path, quality=90)
        else:  # a file has at most 65,000 links on ext4: a new one every 60,000
            small = root / f"small-{linked // 60_000}.jpg"
            if not small.exists():
                Image.fromarray(small_pixels).save(small, quality=90)
            os.link(small, path)
            linked += 1
    return big


def write_vgg16_weights(path: Path) -> None:
    """A torchvision-format VGG16 state dict, `features.*` only (what the encoder reads), random weights."""
    from torchvision.models import vgg16

    torch.manual_seed(0)
    state = {key: value for key, value in vgg16(weights=None).state_dict().items() if key.startswith("features.")}
    torch.save(state, path)


class SyntheticVGG(nn.Module):
    """Stands in for VGG16's conv5 map in the cache writer: (B, 3, 224, 224) -> (B, 196, 512) ReLU'd normal values,
    drawn from a pool of 64 maps (fresh normal draws cost 10 ms an image, as much as decoding it)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = torch.relu(torch.randn(64, 196, 512, generator=torch.Generator().manual_seed(0)))
        self.drawn = 0

    def forward(self, images: Tensor) -> Tensor:
        picks = (torch.arange(images.shape[0]) + self.drawn) % len(self.pool)
        self.drawn += images.shape[0]
        return self.pool[picks]  # (B, 196, 512)


def write_cache(out: Path, *, num_workers: int) -> None:
    """The feature cache of out/dataset_coco.json, through `build_cache`, for the shipped coco_soft config."""
    from caption.cli.lightning.commands import CaptionCLI
    from caption.cli.lightning.parser import CaptionArgumentParser
    from caption.data.datamodule import CaptionDataModule
    from caption.data.features import build_cache
    from caption.training.module import CaptionModule

    cli = CaptionCLI(CaptionModule, CaptionDataModule, run=False, parser_class=CaptionArgumentParser,
                     auto_configure_optimizers=False, args=["--config", "coco_soft", *data_paths(out)])
    data = cli.datamodule
    build_cache(data.features, encoder=SyntheticVGG(), config=data.cache_config(), source=data.source,
                records=data.records(), on_bad_image=data.on_bad_image, batch_size=data.eval_batch_size,
                num_workers=num_workers, device=torch.device("cpu"))


def data_paths(out: Path, annotations: str = "dataset_coco.json", features: str = "features") -> list[str]:
    """The only settings a rehearsal changes in the shipped configs besides step counts: where things are."""
    return ["--data.source.init_args.annotations", str(out / annotations),
            "--data.source.init_args.images", str(out / "images"), "--data.features", str(out / features),
            "--model.encoder.weights", str(out / "vgg16_features.pth")]


def generate(scale: Fraction, out: Path, *, full_size_images: int) -> None:
    """Everything but the feature cache (`write_cache`)."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "dataset_coco.json").exists():
        data = dataset(scale)
        big = write_images(data, out / "images", full_size_images=full_size_images)
        (out / "features_subset.json").write_text(json.dumps({"images": big, "dataset": "coco"}))
        (out / "dataset_coco.json").write_text(json.dumps(data))
    if not (out / "vgg16_features.pth").exists():
        write_vgg16_weights(out / "vgg16_features.pth")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=Fraction, default=Fraction(1, 16), help="share of COCO's size: 1/16, 1/4, 1")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--full_size_images", type=int, default=256, help="640x480 JPEGs (the feature stage's)")
    parser.add_argument("--num_workers", type=int, default=2, help="processes decoding images for the cache writer")
    args = parser.parse_args(argv)
    generate(args.scale, args.out.resolve(), full_size_images=args.full_size_images)
    write_cache(args.out.resolve(), num_workers=args.num_workers)  # says it is up to date if it is


if __name__ == "__main__":
    main(sys.argv[1:])
