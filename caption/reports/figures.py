"""`caption compare`'s figures: the same images captioned by each model, overlays side by side, and the training
curves of each run from its CSV or TensorBoard logs (`caption.reports.logs`)."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from caption.reports.logs import Curves, UnreadableLogs, in_order, read_curves
from caption.reports.runs import Model
from caption.data.datamodule import CaptionDataModule
from caption.data.sources.category_words import named_labels
from caption.evaluation.overlays import Overlay, comparison_figure, to_uint8
from caption.evaluation.report import Evaluation
from caption.io.outputs import save_figure


def logged_curves(models: list[Model]) -> tuple[dict[str, Curves], dict[str, str]]:
    """Each model's curves ({model name: curves}) and the models left out ({model name: why})."""
    curves, left_out = {}, {}
    for model in models:
        if model.logs is None:
            left_out[model.name] = f"no logs (metrics.csv or TensorBoard event files) found for {model.checkpoint}"
            continue
        try:
            curves[model.name] = read_curves(model.logs)
        except UnreadableLogs as error:
            left_out[model.name] = str(error)
    return curves, left_out


MARKED = 30  # a curve of fewer points gets a marker at each (one validation of a one-epoch run is a dot)
PANELS_PER_ROW = 4


def curves_figure(curves: dict[str, Curves]) -> Figure | None:
    """One panel per logged quantity (the training loss, then each validation figure: `caption.reports.logs`), one
    line per model, over the optimizer steps of every run on one integer axis from 0; None when no model has curves."""
    names = in_order({name for logged in curves.values() for name in logged})
    if not names:
        return None
    last_step = max(step for logged in curves.values() for points in logged.values() for step, _ in points)
    columns = min(len(names), PANELS_PER_ROW)
    rows = math.ceil(len(names) / columns)
    figure = Figure(figsize=(4.2 * columns, 3.2 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, name in zip(axes, names):
        for model_name, logged in curves.items():
            if name in logged:
                steps, values = zip(*logged[name])
                ax.plot(steps, values, marker="o" if len(steps) < MARKED else None, markersize=4, label=model_name)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_xlim(-0.03 * max(1, last_step), max(1, last_step) * 1.03)  # from step 0, a marker there whole
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return figure


def write_curves(models: list[Model], out: Path) -> tuple[Path | None, dict[str, str]]:
    """DIR/curves.png (`curves_figure`; None when no model has curves) and the models left out of it, with why."""
    curves, left_out = logged_curves(models)
    figure = curves_figure(curves)
    if figure is None:
        return None, left_out
    save_figure(figure, out / "curves.png")
    return out / "curves.png", left_out


def overlay_figures(models: list[Model], evaluations: list[Evaluation], data: CaptionDataModule, split: str,
                    count: int, out: Path) -> list[Path]:
    """For the first `count` images of the split: every model's caption and overlays, one figure each."""
    records = sorted(data.usable(split), key=lambda record: record.image_id)[:count]
    paths = []
    for record in records:
        pixels = to_uint8(data.source.image(record), *data.source.normalization)
        boxes = data.source.input_boxes(record)  # in the frame of `pixels`
        overlays = []
        for model, evaluation in zip(models, evaluations):
            caption = evaluation.captions[record.image_id]
            labels = named_labels(caption.words, data.source.word_labels)
            named = [next((box.box for box in boxes if box.label == label), None) for label in labels]
            overlays.append(Overlay(pixels, caption.words, caption.alpha, caption.beta, caption.locations,
                                    title=f"{model.name}: {caption.text}", label=model.name, boxes=named))
        figure = comparison_figure(overlays)
        figure.suptitle(f"image {record.image_id} ({split})")
        paths.append(out / f"overlays-{record.image_id}.png")
        save_figure(figure, paths[-1])
    return paths
