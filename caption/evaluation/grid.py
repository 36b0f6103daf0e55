"""The encoder's grid of L attention locations laid over its (H, W) input image: its shape and its cells' centres.

α gives one weight per location of the encoder's feature map, flattened row-major; these say where on the input
image each location is, for overlays (`caption.evaluation.overlays`, `caption serve`), attention accuracy and
attention correctness (`caption.evaluation.grounding`; the share of each cell inside boxes:
`caption.data.box_targets.cell_coverage`).
"""

import math


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
