"""Input pipeline speed: `caption features` images/s with VGG16, and training steps/s from the feature
cache versus from images, for the same model.

    python benchmarks/input_pipeline.py                     # defaults sized for a 2-core CPU (a few minutes)
    python benchmarks/input_pipeline.py --images 512 --steps 20 --batch-size 64 --hidden-dim 1800

Everything is made on the fly under --out: COCO-sized JPEGs (640x480, photo-like noise so they decode
like photos), a Karpathy-format dataset file with five COCO-length captions per image, and a VGG16
with random weights in torchvision's format (no download; speed does not depend on the values).
The cache is built by the same code as `caption features` (decode, EXIF, RGB, resize 256, crop 224,
normalise, VGG16 features[:30], fp16 write). Training runs Lightning's own loop on CaptionModule with
the same decoder either way; the first step (warm-up) is not timed.
"""

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from PIL import Image
from torchvision import models

from caption.data.datamodule import CaptionDataModule
from caption.data.features import build_cache, cache_config
from caption.data.sources.karpathy import KarpathySource
from caption.io import encoder_weights
from caption.model.encoder import TorchvisionVGG
from caption.training.module import CaptionModule


def make_dataset(out: Path, count: int) -> Path:
    """`count` photo-sized JPEGs with five captions of COCO-like lengths each; all in the train split."""
    rng = np.random.default_rng(0)
    words = [f"w{k}" for k in range(300)]
    entries = []
    for index in range(count):
        small = rng.integers(0, 256, size=(60, 80, 3), dtype=np.uint8)  # smooth-ish content, like a photo
        image = Image.fromarray(small).resize((640, 480), Image.Resampling.BICUBIC)
        image.save(out / "images" / f"{index}.jpg", quality=90)
        lengths = 8 + rng.poisson(2.5, size=5)
        sentences = [{"raw": " ".join(rng.choice(words, size=n))} for n in lengths]
        entries.append({"filename": f"{index}.jpg", "imgid": index, "split": "train", "sentences": sentences})
    path = out / "dataset.json"
    path.write_text(json.dumps({"images": entries}))
    return path


def random_vgg16(path: Path) -> Path:
    features = models.vgg.make_layers(models.vgg.cfgs["D"])
    torch.save({f"features.{key}": value for key, value in features.state_dict().items()}, path)
    return path


class StepTimer(L.Callback):
    """Wall-clock time of each training step, batch loading included."""

    def __init__(self):
        self.ends: list[float] = []

    def on_train_batch_end(self, *args) -> None:
        self.ends.append(time.perf_counter())

    def steps_per_second(self) -> float:
        return (len(self.ends) - 2) / (self.ends[-1] - self.ends[1])  # the first step is warm-up


def train_speed(data: CaptionDataModule, weights: Path, args: argparse.Namespace) -> float:
    torch.manual_seed(0)
    model = CaptionModule(vocabulary=data.vocabulary, encoder={"name": "vgg16", "weights": str(weights)},
                          decoder={"embed_dim": args.embed_dim, "hidden_dim": args.hidden_dim, "init_layers": 1},
                          attention={"dim": 512, "layers": 1})
    timer = StepTimer()
    trainer = L.Trainer(accelerator="cpu", max_steps=args.steps + 1, limit_val_batches=0, num_sanity_val_steps=0,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[timer])
    trainer.fit(model, datamodule=data)
    return timer.steps_per_second()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=128, help="images to encode (and to train on)")
    parser.add_argument("--steps", type=int, default=4, help="timed training steps per setting")
    parser.add_argument("--batch-size", type=int, default=32, help="captions per step; images per encoder batch")
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--hidden-dim", type=int, default=1800, help="LSTM size (paper's COCO config: 1800)")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/input_pipeline"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    (args.out / "images").mkdir(parents=True)
    annotations = make_dataset(args.out, args.images)
    weights = random_vgg16(args.out / "vgg16-random.pth")
    source = KarpathySource(annotations=str(annotations), images=str(args.out / "images"))

    def data(features: str | None) -> CaptionDataModule:
        return CaptionDataModule(source=source, batch_size=args.batch_size, num_workers=args.num_workers,
                                 features=features, encoder_weights=str(weights))

    records = data(None).records()
    config = cache_config(encoder="vgg16", weights=str(weights), freeze=True, source=source, records=records)
    encoder = TorchvisionVGG(name="vgg16", weights=str(weights), reader=encoder_weights)
    started = time.perf_counter()
    build_cache(str(args.out / "features"), encoder=encoder, config=config, source=source, records=records,
                on_bad_image="error", batch_size=args.batch_size, num_workers=args.num_workers,
                device=torch.device("cpu"))
    features_rate = len(records) / (time.perf_counter() - started)

    from_cache = train_speed(data(str(args.out / "features")), weights, args)
    from_images = train_speed(data(None), weights, args)
    print(f"# input pipeline, {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {args.images} 640x480 JPEGs, batch {args.batch_size}, "
          f"LSTM {args.hidden_dim}, {args.num_workers} workers")
    print(f"caption features (VGG16, 224x224): {features_rate:.2f} images/s")
    print(f"training from the cache:  {from_cache:.3f} steps/s")
    print(f"training from images:     {from_images:.3f} steps/s  (cache speed-up x{from_cache / from_images:.1f})")


if __name__ == "__main__":
    main()
