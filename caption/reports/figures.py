"""`caption compare`'s figures: the same images captioned by each model, overlays side by side, and the training
curves of each run from its CSV or TensorBoard logs (`caption.reports.logs`); with groups of runs (seeds), each
group's mean curve over the band from its lowest to its highest run. The attention accuracy's chance levels are
reference lines on its panel, not curves of their own, each run's in its colour with its dashes between the other
runs' (lines at one level all show). Each panel's axis fits its curves with a margin (a chance level outside it is
named with its value in the legend); a quantity that is one constant for every run gets no panel
(`constant_curves`: the report names it with its value)."""

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


# the accuracy of a uniformly random location and of a uniformly chosen object on the same words, and the attention
# correctness of uniform α (`caption.evaluation.grounding.Localisation`): dashed lines on the panel of their figure
# (`CHANCE_PANELS`), each in its run's colour; each kind's (dash, gap) in points, a run's dashes set between the other
# runs' (`interleaved`)
CHANCE_LEVELS = {"val/attention_chance_location": ("chance: random location", (6.0, 3.0)),
                 "val/attention_chance_object": ("chance: random object", (1.5, 2.0)),
                 "val/attention_chance_correctness": ("chance: uniform α", (6.0, 3.0))}
CHANCE_PANELS = {"val/attention_accuracy": ("val/attention_chance_location", "val/attention_chance_object"),
                 "val/attention_correctness": ("val/attention_chance_correctness",)}  # panel -> its chance levels
MARKED = 30  # a curve of fewer points gets a marker at each (one validation of a one-epoch run is a dot)
PANELS_PER_ROW = 4
MARGIN = 0.08  # of a panel's range of values, above and below its curves
FLAT_MARGIN = 0.05  # above and below curves of one value (a panel of several runs, all of them flat at one level)


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


def constant_curves(curves: dict[str, Curves]) -> dict[str, float]:
    """{name: value} of each quantity that every run logging it logged as one and the same value at every step, over
    several steps of a run at least (a share that stays 0): a panel of it would say nothing but its value. A single
    point (one validation) is a panel still; the chance levels are never left out."""
    values: dict[str, set[float]] = {}
    longest: dict[str, int] = {}
    for logged in curves.values():
        for name, points in logged.items():
            values.setdefault(name, set()).update(value for _, value in points)
            longest[name] = max(longest.get(name, 0), len(points))
    return {name: next(iter(found)) for name, found in values.items()
            if len(found) == 1 and longest[name] > 1 and name not in CHANCE_LEVELS}


def fitted_range(lines: list[CurveLine]) -> tuple[float, float]:
    """The y range of a panel: its lines' values (and bands) with `MARGIN` of their range above and below
    (`FLAT_MARGIN`, scaled to the value, when they span none)."""
    values = [value for line in lines for value in [*line.values, *(line.band[0] + line.band[1] if line.band else [])]]
    low, high = min(values), max(values)
    margin = MARGIN * (high - low) if high > low else FLAT_MARGIN * max(abs(high), 1.0)
    return low - margin, high + margin


def interleaved(dashes: tuple[float, float], *, index: int, count: int) -> tuple[float, tuple[float, float]]:
    """The dash pattern of line `index` of `count` at one level: each its own dash in turn, the others' in its gap,
    so that every line shows where they coincide.

    dashes: (dash, gap) in points of one line alone.
    index: which of the lines, from 0.
    count: how many lines share the pattern.
    """
    dash, gap = dashes
    slot = dash + gap
    return index * slot, (dash, slot * count - dash)


def curves_figure(curves: dict[str, Curves], groups: dict[str, list[str]] | None = None) -> Figure | None:
    """One panel per logged quantity (the negative log-likelihood, each objective's terms, each validation figure:
    `caption.reports.logs`) but those of one constant value (`constant_curves`), one line per model (with `groups`,
    per group: `panel_lines`), over the optimizer steps of every run on one integer axis from 0, the values' axis
    fitted to the panel's lines (`fitted_range`), the chance levels on the attention accuracy's and correctness'
    panels (`draw_chance`);
    None when no model has curves."""
    constant = constant_curves(curves)
    names = [name for name in in_order({name for logged in curves.values() for name in logged})
             if name not in CHANCE_LEVELS and name not in constant]
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
        lines = panel_lines(curves, name, groups)
        for line in lines:
            drawn = ax.plot(line.steps, line.values, marker="o" if len(line.steps) < MARKED else None, markersize=4,
                            label=line.label, color=palette[line.label])
            colours[line.label] = drawn[0].get_color()
            if line.band is not None:
                ax.fill_between(line.steps, *line.band, color=drawn[0].get_color(), alpha=0.2, linewidth=0)
        ax.set_ylim(*fitted_range(lines))
        handles = draw_chance(ax, curves, groups, colours, chances=CHANCE_PANELS.get(name, ()))
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(MEANINGS.get(name, ""))  # what a training term is: hard's reward is no SCST reward
        ax.set_xlim(-0.03 * max(1, last_step), max(1, last_step) * 1.03)  # from step 0, a marker there whole
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(handles=ax.get_legend_handles_labels()[0] + handles, fontsize="small" if handles else None)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return figure


def draw_chance(ax: Axes, curves: dict[str, Curves], groups: dict[str, list[str]] | None,
                colours: dict[str, str], *, chances: tuple[str, ...]) -> list[Line2D]:
    """Each run's (or group's) chance levels `chances` (logged names) at its last validation, as horizontal lines
    across `ax` in the colour of its curve of the panel's figure (`colours`, by label), their dashes interleaved
    (`interleaved`), each marked with its kind (`Line2D.get_gid`: the logged name); the legend's entries for the
    kinds drawn, one each, with the levels that lie below or above the axis' range ("chance: random location 0.06
    (below)")."""
    handles = []
    low, high = ax.get_ylim()
    for name in chances:
        kind, dashes = CHANCE_LEVELS[name]
        lines = panel_lines(curves, name, groups)
        for index, line in enumerate(lines):
            ax.axhline(line.values[-1], color=colours.get(line.label, "grey"), linewidth=1.2,
                       linestyle=interleaved(dashes, index=index, count=len(lines)),
                       label=f"_{kind} ({line.label})", gid=name)
        below = dict.fromkeys(f"{line.values[-1]:.2f}" for line in lines if line.values[-1] < low)
        above = dict.fromkeys(f"{line.values[-1]:.2f}" for line in lines if line.values[-1] > high)
        if lines:
            label = kind + "".join(f" {' / '.join(levels)} ({where})" for levels, where in
                                   ((below, "below"), (above, "above")) if levels)
            handles.append(Line2D([], [], color="grey", linestyle=(0, dashes), linewidth=1, label=label))
    ax.set_ylim(low, high)  # the lines leave the range fitted to the curves
    return handles


def write_curves(models: list[Model], out: Path, groups: dict[str, list[str]] | None = None,
                 ) -> tuple[Path | None, dict[str, str], dict[str, float]]:
    """DIR/curves.png (`curves_figure`, by group with `groups`; None when no model has curves), the models left out
    of it, with why, and the quantities left out for being one constant value ({name: value}, `constant_curves`)."""
    curves, left_out = logged_curves(models)
    figure = curves_figure(curves, groups)
    if figure is None:
        return None, left_out, constant_curves(curves)
    save_figure(figure, out / "curves.png")
    return out / "curves.png", left_out, constant_curves(curves)


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
                                    title=f"{model.name}: {caption.text}", label=model.name, boxes=named,
                                    context=model.settings.decoding.hard_eval_context))
        figure = comparison_figure(overlays)
        figure.suptitle(f"image {record.image_id} ({split})")
        paths.append(out / f"overlays-{record.image_id}.png")
        save_figure(figure, paths[-1])
    return paths
