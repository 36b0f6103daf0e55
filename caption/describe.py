"""`caption describe`: caption your own images and see where the model looked.

    caption describe --ckpt runs/shapes_soft/checkpoints/last.ckpt photo.jpg photos/ --out figures

Prints each image's caption and writes DIR/<name>.png: the image as the encoder sees it, then one
panel per word with its attention overlay (`caption.visualize`), and DIR/captions.json. Any image
Pillow opens works, whatever its size or mode (read by `caption.data.images.read_rgb`); folders
are captioned in batches, and their unreadable files skipped with a warning.

Images get the transform the checkpoint's encoder was trained with: for vgg16/vgg19 the VGG
weights' own transform (`caption.data.images.image_transform`: short side 256, centre crop 224,
ImageNet normalisation, as the paper) with the sizes of the training data; for small_vgg (built-in
data) a resize to the training size stored in the checkpoint and the built-in data's normalisation.
"""

import argparse
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms.functional import pil_to_tensor

from caption.checkpoints import load_module, read_checkpoint
from caption.data.images import BadImageError, image_transform, read_rgb
from caption.data.shapes import PIXEL_MEAN, PIXEL_STD
from caption.errors import ConfigError
from caption.evaluate import Generated, generate, pick_device, positive_int
from caption.module import CaptionModule
from caption.outputs import save_figure, writable_folder, write_text
from caption.visualize import Overlay, overlay_figure, to_uint8

IMAGE_EXTENSIONS = frozenset(Image.registered_extensions())  # ".jpg", ".png", ... every format Pillow reads


def normalization(module: CaptionModule) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (mean, std) of the encoder's inputs in 0..1 pixel units."""
    if module.hparams.encoder == "small_vgg":
        return (PIXEL_MEAN,) * 3, (PIXEL_STD,) * 3
    transform = image_transform()
    return tuple(transform.mean), tuple(transform.std)


def input_transform(
    module: CaptionModule, source: dict[str, Any] | None = None, image_size: int | None = None
) -> Callable[[Image.Image], Tensor]:
    """RGB image -> the encoder's input (3, H, W), transformed as in training.

    vgg16/vgg19: the VGG weights' transform, with the resize and crop sizes of the image-file source
    the model was trained on (`source`: its {class_path, init_args} from the checkpoint) if it set any.
    small_vgg: resized to the training size, `image_size` (square) if given, else the checkpoint's.
    """
    if module.hparams.encoder != "small_vgg":
        init_args = (source or {}).get("init_args", {})
        return image_transform(resize_size=init_args.get("resize_size"), crop_size=init_args.get("crop_size"))
    if image_size is not None:
        height, width = image_size, image_size
    elif module.hparams.image_size is not None:
        height, width = (int(side) for side in module.hparams.image_size)
    else:
        raise ConfigError(
            "the checkpoint does not record the image size its encoder was trained on (written by an older "
            "version): pass --image-size, e.g. --image-size 64 for the built-in data"
        )

    def transform(image: Image.Image) -> Tensor:
        pixels = pil_to_tensor(image.resize((width, height), Image.Resampling.BILINEAR)).float() / 255  # (3, H, W)
        return (pixels - PIXEL_MEAN) / PIXEL_STD

    return transform


def image_files(inputs: list[Path]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for every input file and every image file in input folders, in order, once each."""
    files: dict[Path, bool] = {}
    for path in inputs:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
            if not found:
                warnings.warn(f"folder {path} holds no image files")
            for file in found:
                files.setdefault(file.resolve(), False)
        elif path.is_file():
            files[path.resolve()] = True
        else:
            raise ConfigError(f"{path}: no such image file or folder")
    return list(files.items())


def batches(files: list[tuple[Path, bool]], size: int) -> Iterator[list[tuple[Path, Image.Image]]]:
    """Readable images in batches; unreadable ones from folders are skipped with a warning."""
    batch = []
    for path, explicit in files:
        try:
            batch.append((path, read_rgb(path, min_side=1)))
        except BadImageError as error:
            if explicit:
                raise BadImageError(f"{path}: {error}") from None
            warnings.warn(f"skipping {path}: {error}")
            continue
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def unique_name(stem: str, taken: set[str]) -> str:
    """`stem`, or `stem-2`, `stem-3`, ... if taken (photo.jpg and photo.png make photo and photo-2); marks it taken."""
    name, copy = stem, 1
    while name in taken:
        copy += 1
        name = f"{stem}-{copy}"
    taken.add(name)
    return name


def describe(
    module: CaptionModule,
    files: list[tuple[Path, bool]],
    *,
    out: Path,
    source: dict[str, Any] | None = None,
    image_size: int | None = None,
    beam_size: int | None = None,
    batch_size: int = 16,
    columns: int = 6,
    figure_format: str = "png",
) -> list[tuple[Path, Generated, Path]]:
    """Caption `files`; write one overlay figure each under `out`. Returns (image, caption, figure) triples.

    `source` and `image_size` choose the input transform (see `input_transform`).
    """
    transform, (mean, std) = input_transform(module, source, image_size), normalization(module)
    writable_folder(out, what="output")
    described: list[tuple[Path, Generated, Path]] = []
    taken: set[str] = set()
    for batch in batches(files, batch_size):
        images = torch.stack([transform(image) for _, image in batch])  # (B, 3, H, W)
        batch_inputs = {"image": images, "image_id": torch.arange(len(batch))}
        generated = generate(module, batch_inputs, beam_size=beam_size or module.hparams.beam_size)
        for (path, _), caption, pixels in zip(batch, generated, images):
            figure_path = out / f"{unique_name(path.stem, taken)}.{figure_format}"
            overlay = Overlay(to_uint8(pixels, mean, std), caption.words, caption.alpha, caption.beta, caption.location,
                              title=caption.caption, label=path.name)
            save_figure(overlay_figure(overlay, columns=columns), figure_path)
            described.append((path, caption, figure_path))
            print(f"{path}: {caption.caption}", flush=True)
    return described


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="caption describe",
        description="Caption images and draw where the model looked for each word (one figure per image).",
    )
    parser.add_argument("inputs", nargs="+", type=Path, metavar="IMAGE_OR_FOLDER", help="image files and/or folders")
    parser.add_argument("--ckpt", required=True, help="checkpoint written by `caption fit`")
    parser.add_argument("--beam-size", type=positive_int, default=None, help="beam width (default: the checkpoint's)")
    parser.add_argument("--out", type=Path, default=Path("captions"), help="folder for the figures (default: captions)")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="images per batch (default: 16)")
    parser.add_argument("--image-size", type=positive_int, default=None,
                        help="small_vgg only: input side, for checkpoints that do not record it")
    parser.add_argument("--columns", type=positive_int, default=6, help="panels per row (default: 6)")
    parser.add_argument("--format", default="png", choices=("png", "pdf", "svg", "jpg"), help="figure format")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    args = parser.parse_args(argv)
    writable_folder(args.out, what="--out")  # errors (CaptionError) are printed in one line by `caption`
    checkpoint = read_checkpoint(args.ckpt)
    module = load_module(args.ckpt, checkpoint).to(pick_device(args.device))
    described = describe(
        module, image_files(args.inputs), out=args.out, beam_size=args.beam_size, image_size=args.image_size,
        source=checkpoint.get("datamodule_hyper_parameters", {}).get("source"),
        batch_size=args.batch_size, columns=args.columns, figure_format=args.format,
    )
    captions = [{"file": str(path), "caption": generated.caption, "figure": str(figure)}
                for path, generated, figure in described]
    write_text(args.out / "captions.json", json.dumps(captions, indent=1) + "\n")
    print(f"wrote {len(described)} figures and captions.json to {args.out}")
