"""`caption compare`'s figures: the same images captioned by each model, overlays side by side, and the training
curves of each run from its CSV or TensorBoard logs (`caption.reports.logs`); with groups of runs (seeds), each
group's mean curve over the band from its lowest to its highest run. The attention accuracy's chance levels are
reference lines on its panel, not curves of their own."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from caption.reports.logs import MEANINGS, Curves, UnreadableLogs, in_order, read_curves
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


ACCURACY = "val/attention_accuracy"
# the accuracy of a uniformly random location and of a uniformly chosen object on the same words
# (`caption.evaluation.grounding.Localisation`): dashed lines on the accuracy's panel, each in its run's colour
CHANCE_LEVELS = {"val/attention_chance_location": ("chance: random location", "--"),
                 "val/attention_chance_object": ("chance: random object", (0, (1, 2)))}
MARKED = 30  # a curve of fewer points gets a marker at each (one validation of a one-epoch run is a dot)
PANELS_PER_ROW = 4


@dataclass(frozen=True)
class CurveLine:
    """One line of a panel: a run's curve, or the mean of a group's runs over their min–max band."""

    label: str
    steps: list[int]
    values: list[float]
    band: tuple[list[float], list[float]] | None = None  # (lowest, highest) over the group's runs at each step


def panel_lines(curves: dict[str, Curves], name: str, groups: dict[str, list[str]] | None) -> list[CurveLine]:
    """The lines of the panel of `name`: one per run; with `groups` ({group: its runs' names}), one per group, the
    mean of its runs that logged `name` at the steps they all logged (runs of one config log the same steps), with
    their min–max band; a group whose runs share no step is drawn run by run."""
    lines = []
    for group, runs in (groups or {run: [run] for run in curves}).items():
        logged = {run: dict(curves[run][name]) for run in runs if name in curves.get(run, {})}
        steps = sorted(set.intersection(*(set(points) for points in logged.values()))) if logged else []
        if len(logged) < 2 or not steps:
            lines += [CurveLine(run, *map(list, zip(*curves[run][name]))) for run in logged]
            continue
        values = np.array([[points[step] for step in steps] for points in logged.values()])  # (runs, steps)
        lines.append(CurveLine(f"{group} (mean of {len(logged)} runs)", steps, list(values.mean(0)),
                               band=(list(values.min(0)), list(values.max(0)))))
    return lines


def curves_figure(curves: dict[str, Curves], groups: dict[str, list[str]] | None = None) -> Figure | None:
    """One panel per logged quantity (the negative log-likelihood, each objective's terms, each validation figure:
    `caption.reports.logs`), one line per model (with `groups`, per group: `panel_lines`), over the optimizer steps
    of every run on one integer axis from 0, the chance levels on the attention accuracy's panel (`draw_chance`);
    None when no model has curves."""
    names = [name for name in in_order({name for logged in curves.values() for name in logged})
             if name not in CHANCE_LEVELS]
    if not names:
        return None
    last_step = max(step for logged in curves.values() for points in logged.values() for step, _ in points)
    columns = min(len(names), PANELS_PER_ROW)
    rows = math.ceil(len(names) / columns)
    figure = Figure(figsize=(4.2 * columns, 3.2 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    cycle = [style["color"] for style in matplotlib.rcParams["axes.prop_cycle"]]
    labels = list(dict.fromkeys(line.label for name in names for line in panel_lines(curves, name, groups)))
    palette = {label: cycle[index % len(cycle)] for index, label in enumerate(labels)}  # one colour a model, everywhere
    for ax, name in zip(axes, names):
        colours = {}
        for line in panel_lines(curves, name, groups):
            drawn = ax.plot(line.steps, line.values, marker="o" if len(line.steps) < MARKED else None, markersize=4,
                            label=line.label, color=palette[line.label])
            colours[line.label] = drawn[0].get_color()
            if line.band is not None:
                ax.fill_between(line.steps, *line.band, color=drawn[0].get_color(), alpha=0.2, linewidth=0)
        handles = draw_chance(ax, curves, groups, colours) if name == ACCURACY else []
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(MEANINGS.get(name, ""))  # what a training term is: hard's reward is no SCST reward
        ax.set_xlim(-0.03 * max(1, last_step), max(1, last_step) * 1.03)  # from step 0, a marker there whole
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(handles=ax.get_legend_handles_labels()[0] + handles)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return figure


def draw_chance(ax: Axes, curves: dict[str, Curves], groups: dict[str, list[str]] | None,
                colours: dict[str, str]) -> list[Line2D]:
    """Each run's (or group's) chance levels at its last validation, as horizontal lines across `ax` in the colour
    of its accuracy curve (`colours`, by label), each marked with its kind (`Line2D.get_gid`: the logged name); the
    legend's entries for the kinds drawn, one each."""
    handles = []
    for name, (kind, style) in CHANCE_LEVELS.items():
        lines = panel_lines(curves, name, groups)
        for line in lines:
            ax.axhline(line.values[-1], color=colours.get(line.label, "grey"), linestyle=style, linewidth=1,
                       label=f"_{kind} ({line.label})", gid=name)
        if lines:
            handles.append(Line2D([], [], color="grey", linestyle=style, linewidth=1, label=kind))
    return handles


def write_curves(models: list[Model], out: Path,
                 groups: dict[str, list[str]] | None = None) -> tuple[Path | None, dict[str, str]]:
    """DIR/curves.png (`curves_figure`, by group with `groups`; None when no model has curves) and the models left out
    of it, with why."""
    curves, left_out = logged_curves(models)
    figure = curves_figure(curves, groups)
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
