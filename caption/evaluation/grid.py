"""The encoder's grid of L attention locations laid over its (H, W) input image: its shape, its cells' centres, the
share of each cell inside boxes.

α gives one weight per location of the encoder's feature map, flattened row-major; these say where on the input
image each location is, for overlays (`caption.evaluation.overlays`, `caption serve`), attention accuracy and, through
the share of each cell inside an object's boxes, attention correctness (`caption.evaluation.grounding`).
"""

import math
from collections.abc import Sequence

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
    """The share of each grid cell's area inside the union of `boxes` (L,), in float64, exactly: the image is cut at
    every cell edge and box edge into rectangles each wholly inside or outside every box and within one cell, and each
    cell sums the area of its rectangles inside a box (overlapping boxes count once). Boxes are cut to the image."""
    height, width = image_size
    rows, columns = attention_grid(locations, image_size)
    cut = [(max(x0, 0.0), max(y0, 0.0), min(x1, width), min(y1, height)) for x0, y0, x1, y1 in boxes]
    cut = [box for box in cut if box[2] > box[0] and box[3] > box[1]]
    if not cut:
        return torch.zeros(locations, dtype=torch.float64)
    corners = torch.tensor(cut, dtype=torch.float64)  # (N, 4)
    column_edges = torch.arange(columns + 1, dtype=torch.float64) * width / columns  # (columns + 1,)
    row_edges = torch.arange(rows + 1, dtype=torch.float64) * height / rows  # (rows + 1,)
    xs = torch.unique(torch.cat([column_edges, corners[:, 0::2].flatten()]))  # (X + 1,) sorted
    ys = torch.unique(torch.cat([row_edges, corners[:, 1::2].flatten()]))  # (Y + 1,) sorted
    middle_x, middle_y = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2  # (X,), (Y,)
    within_x = (corners[:, None, 0] <= middle_x) & (middle_x < corners[:, None, 2])  # (N, X)
    within_y = (corners[:, None, 1] <= middle_y) & (middle_y < corners[:, None, 3])  # (N, Y)
    covered = (within_y[:, :, None] & within_x[:, None, :]).any(0)  # (Y, X)
    area = (ys[1:] - ys[:-1])[:, None] * (xs[1:] - xs[:-1])[None, :] * covered  # (Y, X)
    column = (middle_x * columns / width).long().clamp(max=columns - 1)  # (X,)
    row = (middle_y * rows / height).long().clamp(max=rows - 1)  # (Y,)
    cell = row[:, None] * columns + column[None, :]  # (Y, X)
    inside_area = torch.zeros(locations, dtype=torch.float64).index_add_(0, cell.flatten(), area.flatten())  # (L,)
    return inside_area / (height * width / locations)
