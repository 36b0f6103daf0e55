"""What the attention page shows, as JSON: each model's captions of an image and, for every word, its overlay.

An image (an upload, or a test image of the first model's data) is captioned by every model with `Captioner`; each
word's panel is drawn as `captioner.plot` draws it (`caption.evaluation.overlays.overlay_pixels`: the heat map of α,
upsampled and smoothed, over the grey image the encoder saw) and sent as a PNG, on one colour scale for all the
panels of every model (soft's and hard's side by side read alike): the columns are the blocks of the figure
`caption compare` draws of the image (`caption.evaluation.overlays.comparison_figure`).
"""

from __future__ import annotations

import base64
import io
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_hex
from PIL import Image

from caption.data.sources.base import CaptionSource
from caption.data.sources.image_files import read_rgb
from caption.data.sources.records import ImageRecord
from caption.errors import CaptionError, ConfigError
from caption.evaluation.grid import attention_grid
from caption.evaluation.overlays import COLORMAP, Overlay, overlay_pixels, shared_vmax, to_uint8
from caption.inference import training_data
from caption.model.captions import Caption
from caption.reports.runs import Model
from caption.serving import MAX_CAPTIONS

COLOUR_BAR_STOPS = 11  # colours of the colour bar's gradient


def png_data_url(pixels: np.ndarray) -> str:
    """An (H, W, 3) uint8 image as a data: URL the page shows without another request."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def page_num_captions(value: Any) -> int:
    """`num_captions` checked: an integer in 1..MAX_CAPTIONS (the server reads the page's text as digits 0-9)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"num_captions must be a whole number, got {value!r}")
    if not 1 <= value <= MAX_CAPTIONS:
        raise ConfigError(f"num_captions must be between 1 and {MAX_CAPTIONS}, got {value}")
    return value


@dataclass
class TestImages:
    """The first images of the test split of the first model's data, if that data is on this machine."""

    source: CaptionSource | None = None
    records: list[ImageRecord] = field(default_factory=list)
    problem: str | None = None  # why there are none

    def image(self, index: int) -> Image.Image:
        """Test image `index` as RGB: its file, or the source's pixels for data held in memory (the built-in data)."""
        if not 0 <= index < len(self.records):
            raise ConfigError(f"no test image {index}: there are {len(self.records)}")
        record = self.records[index]
        if record.file is not None:
            return read_rgb(record.file, min_side=1)
        return Image.fromarray(to_uint8(self.source.image(record), *self.source.normalization))


def find_test_images(model: Model, count: int) -> TestImages:
    """Up to `count` test images of `model`'s training data; none, with the reason, when its data is not here."""
    if count == 0:
        return TestImages(problem="no test images asked for (--test_images 0)")
    try:
        data = training_data(model.captioner)
        return TestImages(source=data.source, records=data.split("test")[:count])
    except (CaptionError, OSError, ValueError) as error:
        return TestImages(problem=f"no test images from the data of {model.checkpoint}: {' '.join(str(error).split())}")


class AttentionViewer:
    """The models the page compares, and the answers it gets (plain JSON-ready dicts).

    Args:
        models: the models, named (`caption.reports.runs.read_models`), shown in this order side by side.
        num_captions: the captions per image the page starts with.
        test_images: how many test images of the first model's data the page offers.
    """

    def __init__(self, models: list[Model], *, num_captions: int = 1, test_images: int = 12):
        self.models = models
        self.num_captions = page_num_captions(num_captions)
        self.test_images = find_test_images(models[0], test_images)
        self.lock = threading.Lock()  # one image at a time through the models

    def about(self) -> dict[str, Any]:
        """The models, the test images on offer and the page's settings."""
        return {
            "models": [{"name": model.name, "kind": model.settings.attention.kind, "checkpoint": str(model.checkpoint)}
                       for model in self.models],
            "num_captions": self.num_captions,
            "max_captions": MAX_CAPTIONS,
            "test_images": [{"index": index, "image_id": record.image_id, "references": list(record.references)}
                            for index, record in enumerate(self.test_images.records)],
            "test_images_problem": self.test_images.problem,
        }

    def test_image_png(self, index: int) -> bytes:
        """Test image `index` as PNG bytes (the page's thumbnails)."""
        buffer = io.BytesIO()
        self.test_images.image(index).save(buffer, format="PNG")
        return buffer.getvalue()

    def caption_test_image(self, index: int, *, num_captions: int) -> dict[str, Any]:
        """`caption_image` of test image `index`, with its reference captions."""
        answer = self.caption_image(self.test_images.image(index), num_captions=num_captions)
        return {**answer, "references": list(self.test_images.records[index].references)}

    def caption_image(self, image: Image.Image, *, num_captions: int) -> dict[str, Any]:
        """Every model's `num_captions` best captions of `image`, each word with its overlay (a PNG data URL), its
        gate β and, for hard attention, the grid cell it chose; `colours`: the colour map, from 0 to `vmax`, the top
        of the one colour scale of every model's panels."""
        num_captions = page_num_captions(num_captions)
        answers = []
        with self.lock:
            for model in self.models:
                pixels = model.captioner.prepare(image)  # (3, H, W)
                ranked = model.captioner.caption_batch({"image": pixels[None]}, num_captions=num_captions)[0]
                answers.append((model, [model.captioner.overlay(pixels, caption) for caption in ranked], ranked))
        vmax = shared_vmax([overlay for _, overlays, _ in answers for overlay in overlays])
        return {
            "colours": [to_hex(colormaps[COLORMAP](x)) for x in np.linspace(0.0, 1.0, COLOUR_BAR_STOPS)],
            "vmax": vmax,
            "models": [model_answer(model, overlays, ranked, vmax=vmax) for model, overlays, ranked in answers],
        }


def model_answer(model: Model, overlays: list[Overlay], ranked: list[Caption], *, vmax: float) -> dict[str, Any]:
    """One model's part of an answer: the image it saw, its attention grid, the top of the colour scale its panels
    are drawn on (`vmax`: the largest smoothed α of every model's panels) and its ranked captions."""
    image = overlays[0].image
    grid = attention_grid(ranked[0].alpha.shape[-1], image.shape[:2])
    return {
        "name": model.name,
        "kind": model.settings.attention.kind,
        "image": png_data_url(image),
        "size": list(image.shape[:2]),
        "grid": list(grid),
        "vmax": vmax,
        "captions": [caption_answer(overlay, caption, grid=grid, vmax=vmax)
                     for overlay, caption in zip(overlays, ranked)],
    }


def caption_answer(overlay: Overlay, caption: Caption, *, grid: tuple[int, int], vmax: float) -> dict[str, Any]:
    """One caption: its text, log-probability and words, each word with its panel, β and (hard) chosen cell."""
    panels = overlay_pixels(overlay.image, caption.alpha, vmax=vmax) if caption.words else []
    return {
        "text": caption.text,
        "log_prob": caption.log_prob,
        "words": [
            {
                "word": word,
                "beta": float(caption.beta[t]),
                "overlay": png_data_url(panels[t]),
                "cell": None if caption.locations is None else list(divmod(int(caption.locations[t]), grid[1])),
            }
            for t, word in enumerate(caption.words)
        ],
    }
