"""`caption describe`: caption your own images and see where the model looked.

    caption describe --ckpt_path runs/shapes_soft photo.jpg photos/ --predictions.out figures

Prints each image's caption and writes DIR/captions.json, captions.csv (`caption.evaluation.results`, after each batch,
before its figures) and DIR/<name>.png (the image as the encoder sees it, then one panel per word with its overlay:
`caption.evaluation.overlays`); with `--predictions.num_captions k`, each image's k best beams and DIR/<name>_1.png
... _k.png. Images get the transform of the model's training data (`caption.inference.Captioner`); folders are
captioned in batches. The model, torch and the image libraries are imported once the options are read. More:
docs/attention.md#from-the-command-line.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from caption.cli._options import (
    CommandParser,
    add_batch_size,
    add_checkpoint,
    add_decoding,
    add_device,
    add_num_captions,
    add_output,
    device,
    positive_int,
)
from caption.errors import CaptionError, CaptionWarning
from caption.io.outputs import readable_name, save_figure, writable_folder

if TYPE_CHECKING:
    from PIL import Image

    from caption.evaluation.results import Result
    from caption.inference import Captioner


def batches(files: list[tuple[Path, bool]], size: int) -> Iterator[list[tuple[Path, Image.Image]]]:
    """Readable images in batches; unreadable ones from folders are skipped with a warning."""
    from caption.data.sources.image_files import BadImageError, read_rgb

    batch = []
    for path, explicit in files:
        try:
            batch.append((path, read_rgb(str(path), min_side=1)))
        except BadImageError as error:
            if explicit:
                raise BadImageError(f"{path}: {error}") from None
            warnings.warn(f"skipping {path}: {error}", CaptionWarning)
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
    captioner: Captioner,
    files: list[tuple[Path, bool]],
    *,
    out: Path,
    beam_size: int | None = None,
    max_length: int | None = None,
    num_captions: int | None = None,
    batch_size: int = 16,
    columns: int = 6,
    figure_format: str = "png",
) -> list[Result]:
    """Caption `files` (from `caption.data.sources.image_files.image_files`); write one overlay figure per caption under `out`
    (with `num_captions` = k, each image's k best beams: <name>_1 ... <name>_k). Returns each readable image's
    `Result` (image_id: its position in `files`) with its captions and figures, best first. After each batch is
    captioned, out/captions.json and captions.csv hold every caption so far (with the figures they name), before
    that batch's figures are drawn: figures take longest, and an interrupted run keeps its captions."""
    import torch

    from caption.evaluation.overlays import overlay_figure
    from caption.evaluation.results import result, write_results

    writable_folder(out, what="output")
    described: list[Result] = []
    taken: set[str] = set()
    positions = {path: position for position, (path, _) in enumerate(files)}
    for batch in batches(files, batch_size):
        images = torch.stack([captioner.prepare(image) for _, image in batch])  # (B, 3, H, W)
        captions = captioner.caption_batch({"image": images}, beam_size=beam_size, max_length=max_length,
                                           num_captions=num_captions)
        drawn = []  # (figure path, overlay) of this batch
        for (path, _), ranked, pixels in zip(batch, captions, images):
            ranked = ranked if num_captions is not None else [ranked]
            name = unique_name(path.stem, taken)  # a name that is not UTF-8 stays as it is: the figure's file too
            figures = [out / (f"{name}.{figure_format}" if num_captions is None else f"{name}_{rank}.{figure_format}")
                       for rank in range(1, len(ranked) + 1)]
            drawn += [(figure, captioner.overlay(pixels, caption, label=path.name))
                      for figure, caption in zip(figures, ranked)]
            described.append(result(positions[path], path, ranked, figures))
            if num_captions is None:
                print(f"{readable_name(path)}: {ranked[0].text}", flush=True)
            else:
                print(f"{readable_name(path)}:", *(f"  {rank}. {caption.text}  (log p = {caption.log_prob:.2f})"
                                                   for rank, caption in enumerate(ranked, start=1)), sep="\n",
                      flush=True)
        write_results(described, out)
        for figure, overlay in drawn:
            save_figure(overlay_figure(overlay, columns=columns), figure)
    return described


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption describe",
        description="Caption images and draw where the model looked for each word (one figure per image).",
    )
    parser.add_argument("inputs", nargs="+", type=Path, metavar="IMAGE_OR_FOLDER", help="image files and/or folders")
    add_checkpoint(parser)
    add_output(parser, default="runs/describe", help="folder for the figures, captions.json and captions.csv")
    parser.add_argument("--config", default=None,
                        help="YAML with the training `data:` section, for checkpoints that do not record it")
    add_decoding(parser)
    add_num_captions(parser, default=None,
                     help="the k best beams of each image, each with its log-probability and figure (the beam is "
                          "then at least k wide; default: the best caption only)")
    add_batch_size(parser, default=16)
    parser.add_argument("--columns", type=positive_int, default=6, help="panels per row (default: 6)")
    parser.add_argument("--format", default="png", choices=("png", "pdf", "svg", "jpg"), help="figure format")
    add_device(parser)
    args = parser.parse_args(argv)
    from caption.data.sources.image_files import image_files
    from caption.inference import Captioner

    files = image_files(args.inputs, required="caption describe")  # none: one error line, before the model is read
    # --config: a file, a packaged config's name or a named run (its fragments' `data:` merged)
    captioner = Captioner.from_checkpoint(args.ckpt_path, device=device(args), sha256=args.sha256, config=args.config)
    # once the inputs are known good (no empty folder left by a refused checkpoint), before any work: one line if not
    writable_folder(args.out, what="--predictions.out")
    described = describe(
        captioner, files, out=args.out, beam_size=args.beam_size, max_length=args.max_length,
        num_captions=args.num_captions, batch_size=args.batch_size, columns=args.columns, figure_format=args.format,
    )
    if not described:  # a folder's unreadable files were each named in a warning
        raise CaptionError(f"none of the {len(files)} image files found could be read in "
                           f"{' '.join(map(readable_name, args.inputs))}: give images Pillow can open")
    print(f"wrote {sum(len(item.captions) for item in described)} figures, captions.json and captions.csv to "
          f"{args.out}")
