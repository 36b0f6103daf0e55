"""Reading the figures the project draws: a real photograph to draw on, and a figure's word panels in order."""

import matplotlib.cbook

GRACE_HOPPER = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)


def word_axes(figure):
    """The word panels in reading order (rows top to bottom, left to right)."""
    axes = [ax for ax in figure.axes if ax.get_label() == "word"]
    return sorted(axes, key=lambda ax: (-round(ax.get_position().y0, 3), ax.get_position().x0))
