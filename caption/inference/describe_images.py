"""Captions of your own images and a figure of where the model looked for each word, per caption: what `caption
describe` runs (`describe`), for any `Captioner`.

    described = describe(captioner, image_files(["photos/"], required="describe"), out=Path("figures"))

Writes out/captions.json and captions.csv (`caption.evaluation.results`, after each batch, before its figures) and
out/<name>.png (the image as the encoder sees it, then one panel per word with its overlay:
`caption.evaluation.overlays`); with `num_captions` k, each image's k best beams and out/<name>_1.png ... _k.png.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from PIL import Image

from caption.data.sources.image_files import BadImageError, read_rgb
from caption.errors import CaptionWarning
from caption.evaluation.overlays import overlay_figure
from caption.evaluation.results import Result, result, write_results
from caption.inference.captioner import Captioner
from caption.io.outputs import readable_name, save_figure, writable_folder


def batches(files: list[tuple[Path, bool]], size: int) -> Iterator[list[tuple[Path, Image.Image]]]:
    """Readable images in batches; unreadable ones from folders are skipped with a warning."""
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
    say: Callable[[str], None] = lambda line: None,
) -> list[Result]:
    """Caption `files` (from `caption.data.sources.image_files.image_files`); write one overlay figure per caption under
    `out` (with `num_captions` = k, each image's k best beams: <name>_1 ... <name>_k). Returns each readable image's
    `Result` (image_id: its position in `files`) with its captions and figures, best first. After each batch is
    captioned, out/captions.json and captions.csv hold every caption so far (with the figures they name), before
    that batch's figures are drawn: figures take longest, and an interrupted run keeps its captions. Each image's
    caption(s), once known, go to `say` as one line (`caption describe` prints them)."""
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
                say(f"{readable_name(path)}: {ranked[0].text}")
            else:
                say("\n".join([f"{readable_name(path)}:",
                               *(f"  {rank}. {caption.text}  (log p = {caption.log_prob:.2f})"
                                 for rank, caption in enumerate(ranked, start=1))]))
        write_results(described, out)
        for figure, overlay in drawn:
            save_figure(overlay_figure(overlay, columns=columns), figure)
    return described
