"""Where the model looked: attention overlays in the style of the paper (sec. 5.4).

Each generated word gets a panel: its attention weights α_t over the L locations, upsampled to the
image and smoothed with a Gaussian, laid over the image the encoder saw. The paper upsamples its
14×14 grid by 2⁴ = 16 and smooths with a Gaussian; any grid here is upsampled bilinearly to the
image size and smoothed with σ = one grid cell (16 px at the paper's scale). The original code's
visualisation used σ = 20 px (1.25 cells, `pyramid_expand`); with its reflecting border that
moves the peak of a cell next to the border into the neighbouring cell on small grids (8×8), while
one cell keeps every peak inside its own cell (tests/evaluation/test_overlays.py checks every cell).

Under each panel: the word and the gate β_t (sec. 4.2.1); for hard attention, its location s_t is outlined: at test
time argmax α (its context there is the expectation over α, or with hard_eval_context "argmax" that cell), a sampled
cell only with hard_eval_context "sample"; on data with object boxes, the box of the object a word names is dashed.
Panels wrap into rows for long captions and share one colour scale (α, with a colour bar), so panels and models can
be compared by eye. Figures are matplotlib `Figure`s built without pyplot, so they work headless and in notebooks
alike (a notebook shows one returned by a cell).
"""

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import Patch, Rectangle
from torch import Tensor

from caption.evaluation.grid import attention_grid
from caption.io.outputs import readable_name

SIGMA_CELLS = 1.0  # Gaussian σ in grid cells (ours; the original code's 20 px at 16 px per cell is 1.25)
COLORMAP = "inferno"
PANEL_INCHES = 2.0
HEAT_OPACITY = 0.6  # the heat map over the grey image


@dataclass
class Overlay:
    """One captioned image, ready to draw."""

    image: np.ndarray  # the encoder's input as displayable RGB, uint8   (H, W, 3)
    words: list[str]  # the generated words, without <end>
    alpha: Tensor  # attention weights for each word                    (T, L)
    beta: Tensor  # gate β for each word                                (T,)
    location: Tensor | None  # hard attention: its location s_t at test time, argmax α or a sample  (T,)
    title: str  # shown above the panels (e.g. the full caption)
    label: str = "input"  # shown above the image (e.g. the file or the model)
    boxes: Sequence[tuple[int, int, int, int] | None] = ()  # per word, the (x0, y0, x1, y1) box of what it names
    context: str = "expected"  # hard attention's test-time context (`DecodingSettings.hard_eval_context`)


class NotebookFigure(Figure):
    """A matplotlib `Figure` that a notebook shows when a cell returns it, pyplot imported or not."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png")
        return buffer.getvalue()


def _gaussian_kernel(sigma: float, size: int) -> Tensor:
    """A normalised 1-D Gaussian of ±3σ, at most `size` taps (odd), so that reflect padding fits the image."""
    radius = min(math.ceil(3 * sigma), (size - 1) // 2)
    taps = torch.exp(-torch.arange(-radius, radius + 1, dtype=torch.float32) ** 2 / (2 * sigma**2))
    return taps / taps.sum()


def attention_map(alpha: Tensor, image_size: tuple[int, int]) -> Tensor:
    """α (..., L) -> (..., H, W): upsampled bilinearly to the image, smoothed with a Gaussian of σ = one cell.

    The Gaussian is separable: one pass along x, one along y, with reflected borders (as the original code).
    """
    height, width = image_size
    rows, columns = attention_grid(alpha.shape[-1], image_size)
    grid = alpha.detach().float().cpu().reshape(-1, 1, rows, columns)  # (N, 1, rows, columns)
    maps = F.interpolate(grid, size=(height, width), mode="bilinear", align_corners=False)  # (N, 1, H, W)
    along_x = _gaussian_kernel(SIGMA_CELLS * width / columns, width)
    along_y = _gaussian_kernel(SIGMA_CELLS * height / rows, height)
    maps = F.conv2d(F.pad(maps, (len(along_x) // 2,) * 2 + (0, 0), mode="reflect"), along_x.view(1, 1, 1, -1))
    maps = F.conv2d(F.pad(maps, (0, 0) + (len(along_y) // 2,) * 2, mode="reflect"), along_y.view(1, 1, -1, 1))
    return maps.reshape(*alpha.shape[:-1], height, width)


def grey(image: np.ndarray) -> np.ndarray:
    """The image (H, W, 3) uint8 as grey levels 0..255 (H, W): the heat map reads best over a grey image."""
    return image.mean(axis=-1)


def overlay_pixels(image: np.ndarray, alpha: Tensor, *, vmax: float) -> np.ndarray:
    """What each word's panel shows, as pixels: the heat map of α (T, L) on the colour scale 0..`vmax`, at
    HEAT_OPACITY over the grey image (H, W, 3) uint8 -> (T, H, W, 3) uint8, at the image's size (as drawn by
    `draw_overlays`, for pages and files that show panels without matplotlib's figure)."""
    heat = colormaps[COLORMAP](Normalize(0.0, vmax, clip=True)(attention_map(alpha, image.shape[:2]).numpy()))[..., :3]
    under = grey(image)[None, :, :, None] / 255.0  # (1, H, W, 1)
    pixels = HEAT_OPACITY * heat + (1 - HEAT_OPACITY) * under  # (T, H, W, 3) in 0..1
    return (pixels * 255).round().clip(0, 255).astype(np.uint8)


def panel_rows(words: int, columns: int) -> int:
    """Rows of panels for the image plus one panel per word."""
    return math.ceil((words + 1) / columns)


NAMED_BOX = "the object the word names"  # its box, dashed lime
# hard attention's outlined cell (cyan), by its test-time context (`DecodingSettings.hard_eval_context`)
LOCATION_CELLS = {"expected": "argmax α (hard attention's test-time context\nis the expectation over α)",
                  "argmax": "argmax α (hard attention's test-time context)",
                  "sample": "the cell hard attention sampled"}


def marker_legend(ax: Axes, *, boxes: bool, cells: bool, context: str = "expected") -> None:
    """Under the image's panel (`ax`), what the markers on the word panels are, for those drawn; `context`: hard
    attention's test-time context, which says what its outlined cell is (`LOCATION_CELLS`)."""
    handles = ([Patch(fill=False, edgecolor="lime", linestyle="--", linewidth=1.2, label=NAMED_BOX)] if boxes else [])
    handles += [Patch(fill=False, edgecolor="cyan", linewidth=1.5, label=LOCATION_CELLS[context])] if cells else []
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.02), fontsize=7, frameon=False,
                  borderaxespad=0.0, handlelength=1.5)


def draw_overlays(figure: Figure | SubFigure, overlay: Overlay, *, columns: int, vmax: float) -> ScalarMappable:
    """Draw the image, then one panel per word, wrapping every `columns` panels, the markers' legend under the
    image (`marker_legend`); returns the colour mapping."""
    image_size = overlay.image.shape[:2]
    mappable = ScalarMappable(Normalize(0.0, vmax), COLORMAP)
    axes = figure.subplots(panel_rows(len(overlay.words), columns), columns, squeeze=False).ravel()
    for ax in axes:
        ax.set_axis_off()
    axes[0].imshow(overlay.image)
    axes[0].set_title(readable_name(overlay.label), fontsize=9)  # a file name that is not UTF-8: its bytes as \xNN
    grid = attention_grid(overlay.alpha.shape[-1], image_size)
    gray = grey(overlay.image)  # (H, W)
    maps = attention_map(overlay.alpha, image_size).numpy() if overlay.words else None  # (T, H, W)
    for t, (ax, word) in enumerate(zip(axes[1:], overlay.words)):
        ax.set_axis_on()
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_label("word")
        ax.imshow(gray, cmap="gray", vmin=0, vmax=255)
        ax.imshow(maps[t], cmap=COLORMAP, norm=mappable.norm, alpha=HEAT_OPACITY)
        ax.set_xlabel(f"{word}\nβ = {float(overlay.beta[t]):.2f}", fontsize=10)
        if t < len(overlay.boxes) and overlay.boxes[t] is not None:  # the object this word names, dashed
            x0, y0, x1, y1 = overlay.boxes[t]
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, color="lime",
                                   linestyle="--", linewidth=1.2))
        if overlay.location is not None:
            row, column = divmod(int(overlay.location[t]), grid[1])
            cell_h, cell_w = image_size[0] / grid[0], image_size[1] / grid[1]
            corner = (column * cell_w - 0.5, row * cell_h - 0.5)  # pixel centres are at integers
            ax.add_patch(Rectangle(corner, cell_w, cell_h, fill=False, color="cyan", linewidth=1.5))
    boxes = any(box is not None for box in overlay.boxes[:len(overlay.words)])
    marker_legend(axes[0], boxes=boxes, cells=overlay.location is not None and bool(overlay.words),
                  context=overlay.context)
    figure.suptitle(textwrap.fill(readable_name(overlay.title), width=20 * columns), fontsize=11)
    return mappable


def shared_vmax(overlays: Sequence[Overlay]) -> float:
    """The top of a colour scale shared by every panel: the largest smoothed attention value drawn."""
    peaks = [float(attention_map(o.alpha, o.image.shape[:2]).max()) for o in overlays if o.words]
    return max(peaks, default=1.0) or 1.0


def overlay_figure(overlay: Overlay, *, columns: int = 6) -> Figure:
    """One captioned image: the input, then one panel per word, with a colour bar for α."""
    columns = min(columns, len(overlay.words) + 1)
    rows = panel_rows(len(overlay.words), columns)
    figure = NotebookFigure(figsize=(columns * PANEL_INCHES + 0.8, rows * (PANEL_INCHES + 0.5) + 0.6),
                            layout="constrained")
    mappable = draw_overlays(figure, overlay, columns=columns, vmax=shared_vmax([overlay]))
    figure.colorbar(mappable, ax=figure.axes, shrink=0.6, label="attention α")
    return figure


def comparison_figure(overlays: Sequence[Overlay], *, columns: int = 6) -> Figure:
    """The same image captioned by several models: one block of panels per model, one colour scale."""
    columns = min(columns, max(len(o.words) for o in overlays) + 1)
    rows = [panel_rows(len(o.words), columns) for o in overlays]
    figure = NotebookFigure(
        figsize=(columns * PANEL_INCHES + 0.8, sum(rows) * (PANEL_INCHES + 0.5) + 0.6 * len(overlays)),
        layout="constrained",
    )
    vmax = shared_vmax(overlays)
    blocks = figure.subfigures(len(overlays), 1, height_ratios=rows, squeeze=False).ravel()
    for block, overlay in zip(blocks, overlays):
        mappable = draw_overlays(block, overlay, columns=columns, vmax=vmax)
        block.colorbar(mappable, ax=block.axes, shrink=0.6, label="attention α")
    return figure


def to_uint8(image: Tensor, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """A normalised encoder input (3, H, W) back to displayable RGB (H, W, 3) uint8."""
    mean_, std_ = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]
    pixels = (image.detach().float().cpu() * std_ + mean_).clamp(0, 1)
    return (pixels.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
