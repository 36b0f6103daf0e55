"""The feature cache: the frozen CNN runs once per image, training reads its annotations back.

The paper does not fine-tune the encoder, so the annotations a_i are a fixed function of the image, computed once
instead of at every epoch. `caption features --config X.yaml` fills the config's `data.features` folder with
annotations.npy ((N, L, D) float16, memory-mapped) and manifest.json (what built it, the image list), plus, while
building, progress.json, building.lock and builder.json, so that one build runs at a time and an interrupted one
resumes. With `data.features` set, training and evaluation read the rows and never run the CNN; a cache built for
another encoder, grid, weights file, transform or image list is refused with the command that rebuilds it. The
files, one by one: data/README.md ("The feature cache").
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock, Timeout
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from caption.data.sources.base import CaptionSource
from caption.data.sources.image_files import BadImageError, read_rgb, report_bad_images
from caption.data.sources.image_source import ImageFileSource
from caption.data.sources.records import BadImage, ImageRecord
from caption.errors import CaptionError, EncoderWeightsError
from caption.io.checkpoints import sha256_of
from caption.io.lock_holders import holder_text
from caption.io.outputs import cannot_write, writable_folder, write_json
from caption.model.encoder import TORCHVISION_ENCODERS, annotation_grid, annotation_shape, imagenet_weights

VERSION = 1  # bump when the file layout changes
MANIFEST, ARRAY, PROGRESS = "manifest.json", "annotations.npy", "progress.json"
LOCK, BUILDER = "building.lock", "builder.json"
REBUILD = "rebuild it with `caption features --config <your config>`"
LOG_EVERY_S = 30.0


class FeatureCacheError(CaptionError):
    """A feature cache that is missing, unfinished, or built for another config."""


def weights_identity(encoder: str, weights: str) -> dict[str, str]:
    """What identifies the encoder weights: the official file's name, or a local file's SHA-256."""
    if weights == "none":
        raise FeatureCacheError(
            "a feature cache needs fixed encoder weights (model.encoder.weights: imagenet or a file), not 'none': "
            "random weights differ from one run to the next"
        )
    if weights == "imagenet":
        return {"weights": "imagenet", "file": os.path.basename(imagenet_weights(encoder).url)}
    if not os.path.isfile(weights):
        raise EncoderWeightsError(f"encoder weights file {weights} does not exist")
    return {"weights": "file", "sha256": sha256_of(weights)}


def cache_config(
    *, encoder: str, weights: str, freeze: bool, source: CaptionSource, records: list[ImageRecord],
    grid: int | None = None,
) -> dict[str, Any]:
    """The part of the manifest that must match the config for the cache to be used (`grid`: model.encoder.grid)."""
    if encoder not in TORCHVISION_ENCODERS:
        raise FeatureCacheError(f"a feature cache needs a torchvision encoder ({', '.join(TORCHVISION_ENCODERS)}), "
                                f"not {encoder}")
    if not freeze:
        raise FeatureCacheError(
            "data.features needs a frozen encoder (model.encoder.freeze: true): a trained CNN changes the annotations"
        )
    if not isinstance(source, ImageFileSource):
        raise FeatureCacheError(f"data.features needs a source of image files, not {type(source).__name__}")
    return {
        "version": VERSION,
        "encoder": encoder,
        "grid": annotation_grid(encoder, grid),
        "weights": weights_identity(encoder, weights),
        "transform": source.describe_transform(),
        "images": [[record.image_id, record.file] for record in records],
    }


def mismatch(manifest: dict[str, Any], config: dict[str, Any]) -> str | None:
    """What differs between a manifest and the config it should have been built for, or None."""
    problems = [
        f"{key}: the cache has {manifest.get(key)!r}, the config gives {config[key]!r}"
        for key in ("version", "encoder", "grid", "weights", "transform")
        if manifest.get(key) != config[key]  # caches built before grids existed have none: VGG's unpooled map
    ]
    cached, wanted = manifest.get("images") or [], config["images"]
    if cached != wanted:
        first = next((i for i, (a, b) in enumerate(zip(cached, wanted)) if a != b), min(len(cached), len(wanted)))
        problems.append(
            f"image list: the cache has {len(cached)} images, the config {len(wanted)}, first difference at "
            f"position {first} ({cached[first] if first < len(cached) else None} vs "
            f"{wanted[first] if first < len(wanted) else None})"
        )
    return "; ".join(problems) or None


def read_json_or_none(path: Path) -> dict[str, Any] | None:
    """A JSON file written by `write_json`, or None if it is absent or unreadable (an interrupted write)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class FeatureCache:
    """A finished cache that matches `config`, opened for reading.

    Pickles without its memory map, so every DataLoader worker maps the file itself.
    """

    def __init__(self, folder: str, config: dict[str, Any]):
        self.folder = Path(folder)
        manifest = read_json_or_none(self.folder / MANIFEST)
        if manifest is None:
            raise FeatureCacheError(f"no feature cache in {self.folder} (data.features): build it with "
                                    f"`caption features --config <your config>`")
        if not manifest.get("complete"):
            raise FeatureCacheError(f"the feature cache in {self.folder} is unfinished (an interrupted build): "
                                    f"run `caption features --config <your config>` to finish it")
        problem = mismatch(manifest, config)
        if problem:
            raise FeatureCacheError(f"the feature cache in {self.folder} does not match this config ({problem}): "
                                    f"{REBUILD}, or point data.features at another folder")
        self.skipped = [BadImage.from_dict(entry) for entry in manifest["skipped"]]
        self.rows = {image_id: row for row, (image_id, _) in enumerate(manifest["images"])}
        self._array: np.ndarray | None = None
        if list(self.array.shape) != manifest["shape"] or self.array.dtype != np.float16:
            raise FeatureCacheError(f"{self.folder / ARRAY} holds {self.array.dtype} {list(self.array.shape)}, "
                                    f"not float16 {manifest['shape']}: {REBUILD}")

    @property
    def array(self) -> np.ndarray:
        """The (N, L, D) float16 memory map, opened on first use in each process."""
        if self._array is None:
            try:
                self._array = np.load(self.folder / ARRAY, mmap_mode="r")
            except (OSError, ValueError) as error:
                raise FeatureCacheError(f"cannot read {self.folder / ARRAY} ({error}): {REBUILD}") from None
        return self._array

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_array": None}

    def annotations(self, image_id: int) -> Tensor:
        """(L, D) float16 annotations of one image."""
        return torch.from_numpy(np.array(self.array[self.rows[image_id]]))


class DecodedImages(Dataset):
    """The images of some rows, decoded and transformed: (row, image (3, H, W) or None, reason or None)."""

    def __init__(self, source: ImageFileSource, records: list[ImageRecord], rows: list[int]):
        self.source, self.records, self.rows = source, records, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[int, Tensor | None, str | None]:
        row = self.rows[index]
        try:
            return row, self.source.transform(read_rgb(self.records[row].file, min_side=self.source.min_side)), None
        except BadImageError as error:
            return row, None, str(error)


def start(folder: Path, *, encoder: nn.Module, config: dict[str, Any], source: ImageFileSource,
          records: list[ImageRecord], on_bad_image: str) -> dict[str, Any]:
    """Begin a build: check every header (fast, so bad files stop the build at once), allocate the array."""
    bad = source.check(records, decode=False)
    report_bad_images(bad, total=len(records), on_bad_image=on_bad_image)
    (side,) = config["transform"]["crop_size"]
    locations, dim = annotation_shape(encoder, (side, side))  # (L, D)
    shape = [len(records), locations, dim]
    (folder / ARRAY).unlink(missing_ok=True)  # a new file: never written through a link left at its name
    np.lib.format.open_memmap(folder / ARRAY, mode="w+", dtype=np.float16, shape=tuple(shape)).flush()
    write_json(folder / MANIFEST, {**config, "shape": shape, "dtype": "float16", "complete": False, "skipped": []})
    progress = {"done": 0, "skipped": [image.to_dict() for image in bad]}
    write_json(folder / PROGRESS, progress)
    return progress


@contextlib.contextmanager
def building(folder: Path) -> Iterator[None]:
    """One build of the cache in `folder` at a time: an operating-system lock on `folder/building.lock` (`filelock`),
    released by the system when its process ends in any way, so no stale lock is ever left; a second build refuses,
    naming the live one (host and process id, from `builder.json`, read as untrusted: `caption.io.lock_holders`)."""
    lock = FileLock(folder / LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FeatureCacheError(f"the feature cache in {folder} is being built by another `caption features` "
                                f"({holder_text(folder / BUILDER)}): wait for it to finish") from None
    except OSError as error:
        raise cannot_write(folder / LOCK, error) from None
    try:
        write_json(folder / BUILDER, {"host": socket.gethostname(), "pid": os.getpid()})
        yield
    finally:
        (folder / BUILDER).unlink(missing_ok=True)
        lock.release()


def one_build_at_a_time(build: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """`build(folder, ...)` run on the folder checked writable (`data.features`) and claimed (`building`)."""

    @functools.wraps(build)
    def claimed(folder: str | Path, **settings: Any) -> dict[str, Any]:
        path = writable_folder(folder, what="data.features")
        with building(path):
            return build(path, **settings)

    return claimed


@one_build_at_a_time
def build_cache(
    path: Path,
    *,
    encoder: nn.Module,
    config: dict[str, Any],
    source: ImageFileSource,
    records: list[ImageRecord],
    on_bad_image: str,
    batch_size: int,
    num_workers: int,
    device: torch.device,
) -> dict[str, Any]:
    """Encode every image of `records` into `path` (resuming an interrupted build), one build at a time;
    returns the manifest."""
    encoder = encoder.eval().to(device)
    manifest = read_json_or_none(path / MANIFEST)
    problem = mismatch(manifest, config) if manifest else "no cache yet"
    if problem is None and manifest["complete"]:
        rank_zero_info(f"The feature cache in {path} is up to date ({len(records)} images).")
        return manifest
    progress = read_json_or_none(path / PROGRESS) if problem is None else None
    if progress is None:
        if manifest:
            rank_zero_info(f"Rebuilding the feature cache in {path}: {problem or 'unfinished, without progress'}.")
        progress = start(path, encoder=encoder, config=config, source=source, records=records,
                         on_bad_image=on_bad_image)
    else:
        rank_zero_info(f"Resuming the feature cache in {path} at image {progress['done']} of {len(records)}.")
    skipped = [BadImage.from_dict(entry) for entry in progress["skipped"]]
    left_out = {image.image_id for image in skipped}
    rows = [row for row in range(progress["done"], len(records)) if records[row].image_id not in left_out]
    loader = DataLoader(DecodedImages(source, records, rows), batch_size=batch_size, num_workers=num_workers,
                        collate_fn=list)
    array = np.load(path / ARRAY, mmap_mode="r+")
    started, encoded = time.perf_counter(), 0
    # images/s and the time left; in a log file (not a terminal) a line every LOG_EVERY_S seconds
    interval = 1.0 if sys.stderr.isatty() else LOG_EVERY_S
    with tqdm(total=len(rows), desc="features", unit="image", mininterval=interval) as bar:
        for items in loader:
            good = [(row, image) for row, image, _ in items if image is not None]
            for row, _, reason in items:
                if reason is not None:
                    record = records[row]
                    bad = BadImage(record.image_id, record.split, record.file, reason)
                    report_bad_images([bad], total=len(records), on_bad_image=on_bad_image)
                    skipped.append(bad)
            if good:
                with torch.inference_mode():
                    pixels = torch.stack([image for _, image in good]).to(device)  # (B, 3, H, W)
                    annotations = encoder(pixels).half().cpu()  # (B, L, D)
                if not torch.isfinite(annotations).all():
                    raise FeatureCacheError(f"the encoder gave non-finite annotations (float16 overflow?) for rows "
                                            f"{[row for row, _ in good]}")
                array[[row for row, _ in good]] = annotations.numpy()
                array.flush()
                encoded += len(good)
            write_json(path / PROGRESS, {"done": items[-1][0] + 1, "skipped": [image.to_dict() for image in skipped]})
            bar.update(len(items))
    manifest = {**read_json_or_none(path / MANIFEST), "complete": True,
                "skipped": [image.to_dict() for image in skipped]}
    write_json(path / MANIFEST, manifest)
    (path / PROGRESS).unlink()
    elapsed = time.perf_counter() - started
    rank_zero_info(f"Feature cache in {path}: {len(records)} images, {len(skipped)} left out, "
                   f"{encoded} encoded in {elapsed:.1f} s ({encoded / max(elapsed, 1e-9):.1f} images/s).")
    return manifest
