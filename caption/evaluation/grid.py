"""The encoder's grid of L attention locations laid over its (H, W) input image: its shape, its cells' centres, the
share of each cell inside boxes.

α gives one weight per location of the encoder's feature map, flattened row-major; these say where on the input
image each location is, for overlays (`caption.evaluation.overlays`, `caption serve`), attention accuracy and, through
the share of each cell inside an object's boxes, attention correctness (`caption.evaluation.grounding`).
"""

import math
from collections.abc import Sequence

import numpy as np
import torch

from caption.data.sources.records import Box


def attention_grid(locations: int, image_size: tuple[int, int]) -> tuple[int, int]:
    """(rows, columns) of the encoder's grid of L locations for an (H, W) input: rows·columns = L, same aspect."""
    height, width = image_size
    rows = max(1, round(math.sqrt(locations * height / width)))
    if locations % rows:
        raise ValueError(f"{locations} attention locations do not form a grid shaped like a {height}x{width} image")
    return rows, locations // rows


def location_center(location: int, grid: tuple[int, int], image_size: tuple[int, int]) -> tuple[float, float]:
    """Pixel (x, y) of the centre of grid cell `location` (row-major, as the encoder flattens its feature map)."""
    (rows, columns), (height, width) = grid, image_size
    row, column = divmod(int(location), columns)
    return (column + 0.5) * width / columns, (row + 0.5) * height / rows


def cell_centres(locations: int, image_size: tuple[int, int]) -> list[tuple[float, float]]:
    """Pixel (x, y) centre of each of the encoder's L grid cells, in row-major order."""
    grid = attention_grid(locations, image_size)
    return [location_center(location, grid, image_size) for location in range(locations)]


def inside(box: Box, point: tuple[float, float]) -> bool:
    x0, y0, x1, y1 = box
    return x0 <= point[0] < x1 and y0 <= point[1] < y1  # x1/y1 exclusive


def cell_coverage(boxes: Sequence[Box], locations: int, image_size: tuple[int, int]) -> torch.Tensor:
    """The share of each grid cell's area inside the union of `boxes` (L,), in float64, exactly. One box: its overlap
    with each column times its overlap with each row. Several: the image is cut at every cell edge and box edge into
    rectangles each wholly inside or outside every box and within one cell, and each cell sums the area of its
    rectangles inside a box (overlapping boxes count once). Boxes are cut to the image."""
    height, width = image_size
    rows, columns = attention_grid(locations, image_size)
    cell_area = height * width / locations
    column_edges = np.arange(columns + 1) * width / columns  # (columns + 1,)
    row_edges = np.arange(rows + 1) * height / rows  # (rows + 1,)
    corners = np.array(boxes, dtype=np.float64).reshape(-1, 4)  # (N, 4)
    corners[:, 0::2] = corners[:, 0::2].clip(0, width)
    corners[:, 1::2] = corners[:, 1::2].clip(0, height)
    corners = corners[(corners[:, 2] > corners[:, 0]) & (corners[:, 3] > corners[:, 1])]
    if len(corners) <= 1:
        x0, y0, x1, y1 = corners[0] if len(corners) else (0.0, 0.0, 0.0, 0.0)
        overlap_x = (np.minimum(column_edges[1:], x1) - np.maximum(column_edges[:-1], x0)).clip(min=0)  # (columns,)
        overlap_y = (np.minimum(row_edges[1:], y1) - np.maximum(row_edges[:-1], y0)).clip(min=0)  # (rows,)
        return torch.from_numpy(np.outer(overlap_y, overlap_x).ravel() / cell_area)  # (L,)
    xs = np.unique(np.concatenate([column_edges, corners[:, 0::2].ravel()]))  # (X + 1,) sorted
    ys = np.unique(np.concatenate([row_edges, corners[:, 1::2].ravel()]))  # (Y + 1,) sorted
    middle_x, middle_y = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2  # (X,), (Y,)
    within_x = (corners[:, None, 0] <= middle_x) & (middle_x < corners[:, None, 2])  # (N, X)
    within_y = (corners[:, None, 1] <= middle_y) & (middle_y < corners[:, None, 3])  # (N, Y)
    covered = (within_y[:, :, None] & within_x[:, None, :]).any(0)  # (Y, X)
    area = np.diff(ys)[:, None] * np.diff(xs)[None, :] * covered  # (Y, X)
    column = np.minimum((middle_x * columns / width).astype(np.int64), columns - 1)  # (X,)
    row = np.minimum((middle_y * rows / height).astype(np.int64), rows - 1)  # (Y,)
    cell = row[:, None] * columns + column[None, :]  # (Y, X)
    return torch.from_numpy(np.bincount(cell.ravel(), weights=area.ravel(), minlength=locations) / cell_area)  # (L,)
