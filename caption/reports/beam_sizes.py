"""Grounding against beam size (`caption evaluate|compare --beam_sizes 1 2 3 4 5`): BLEU-4, CIDEr-D and attention
accuracy of each model, or of each group of runs (its seeds), with the split decoded at each beam size.

Beam search ranks captions by likelihood, and may trade where the model looks for it. A row per model or group and
beam size (`beam_size_row`, from each run's `Evaluation.beam_sizes`): a model's scores, or a group's mean over its
seeds ± the half-width of the 95% Student-t interval over them (`caption.reports.intervals.seed_interval`); attention
accuracy only where the data has object boxes. Written as a table (`caption compare`'s report.md, section "Grounding
against beam size"; `caption evaluate`'s console), DIR/beam_sizes.png (each metric against the beam size, a line per
model or group, the seeds' interval as error bars, each seed a dot) and DIR/beam_sizes.json: per model or group its
runs and, per beam size and metric, the mean, half_width, low, high, seeds and each run's score; scores as fractions,
missing ones null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from caption.evaluation.report import METRIC_NAMES, Evaluation, format_score
from caption.io.outputs import json_text, save_figure, write_text
from caption.reports.intervals import SeedInterval, seed_interval
from caption.reports.seeds import INTERVAL, interval_json, number

TITLE = "Grounding against beam size"
SWEPT = ("bleu4", "cider", "attention_accuracy")  # what beam search trades: likelihood's scores, where words look
JSON_FILE = "beam_sizes.json"
FIGURE_FILE = "beam_sizes.png"


@dataclass(frozen=True)
class BeamSizeRow:
    """A model, or a group of runs (its seeds), decoded at each beam size."""

    name: str
    runs: list[str]  # the runs' names; a model on its own is its one run
    scores: dict[int, dict[str, list[float]]]  # beam size -> metric -> each run's score (NaN: missing)
    intervals: dict[int, dict[str, SeedInterval]]  # beam size -> metric -> its mean and interval over the runs


def swept_scores(evaluation: Evaluation | None) -> dict[str, float]:
    """BLEU-4, CIDEr-D and, on data with object boxes, attention accuracy of one decoding of the split."""
    if evaluation is None:
        return {}
    logged = evaluation.scores | evaluation.attention_scores()
    return {name: logged[name] for name in SWEPT if name in logged}


def beam_size_row(name: str, runs: Mapping[str, Evaluation]) -> BeamSizeRow:
    """The row of `name`: its `runs` (run name -> its evaluation, decoded at each beam size), each metric at each beam
    size over the runs (`seed_interval`: the mean, and with two runs or more its 95% Student-t interval)."""
    evaluations = list(runs.values())
    sizes = sorted(set().union(*(evaluation.beam_sizes for evaluation in evaluations)))
    scores = {}
    for size in sizes:
        found = [swept_scores(evaluation.beam_sizes.get(size)) for evaluation in evaluations]
        metrics = [metric for metric in SWEPT if any(metric in run for run in found)]
        scores[size] = {metric: [run.get(metric, float("nan")) for run in found] for metric in metrics}
    intervals = {size: {metric: seed_interval(values) for metric, values in by_metric.items()}
                 for size, by_metric in scores.items()}
    return BeamSizeRow(name, list(runs), scores, intervals)


def swept_metrics(rows: list[BeamSizeRow]) -> list[str]:
    """The metrics any row has, in `SWEPT`'s order (attention accuracy only on data with object boxes)."""
    found = {metric for row in rows for by_metric in row.scores.values() for metric in by_metric}
    return [metric for metric in SWEPT if metric in found]


def row_label(row: BeamSizeRow) -> str:
    """A model's name, or a group's with its seeds counted."""
    return f"{row.name} ({len(row.runs)} seeds)" if len(row.runs) > 1 else row.name


def score_cell(found: SeedInterval | None, *, runs: int) -> str:
    """mean ± half-width in % ("84.0 ± 9.9"; "84.0" for one run; "–" without a score), the seeds counted when fewer
    than the row's runs (a missing score)."""
    if found is None or found.seeds == 0:
        return "–"
    cell = format_score(found.mean) + ("" if found.half_width is None else f" ± {format_score(found.half_width)}")
    return cell + (f" ({found.seeds} seed{'s' * (found.seeds > 1)})" if found.seeds < runs else "")


def beam_size_table(rows: list[BeamSizeRow]) -> str:
    """Markdown: a line per model (or group) and beam size, BLEU-4, CIDEr-D and attention accuracy in %."""
    metrics = swept_metrics(rows)
    first = "group" if any(len(row.runs) > 1 for row in rows) else "model"
    lines = [f"| {first} | beam size | " + " | ".join(METRIC_NAMES[metric] for metric in metrics) + " |",
             "|---|---:|" + "---:|" * len(metrics)]
    for row in rows:
        for size, intervals in row.intervals.items():
            cells = [score_cell(intervals.get(metric), runs=len(row.runs)) for metric in metrics]
            lines.append(f"| {row_label(row)} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def beam_size_section(rows: list[BeamSizeRow]) -> list[str]:
    """report.md's lines: the section's title, what its numbers are, the table and the figure."""
    grouped = any(len(row.runs) > 1 for row in rows)
    boxes = "" if "attention_accuracy" in swept_metrics(rows) else " (no attention accuracy: the data has no boxes)"
    interval = f"; a group's mean over its seeds ± the half-width of the {INTERVAL}" if grouped else ""
    return [f"## {TITLE}", "",
            f"The same images decoded at each beam size (1: greedy), each batch encoded once; BLEU-4, CIDEr and "
            f"attention accuracy in %{boxes}{interval}. The numbers: `{JSON_FILE}`.", "",
            beam_size_table(rows), "", f"![{TITLE.lower()}]({FIGURE_FILE})", ""]


def beam_sizes_figure(rows: list[BeamSizeRow]) -> Figure:
    """A panel per metric (`swept_metrics`), in % against the beam size, a line per model or group with the
    half-width of its seeds' interval as error bars (none for one run) and each seed's own score as a dot; BLEU-4 and
    attention accuracy within 0–100%."""
    metrics = swept_metrics(rows)
    every = sorted({size for row in rows for size in row.intervals})
    figure = Figure(figsize=(4.2 * len(metrics), 3.2), layout="constrained")
    axes = figure.subplots(1, len(metrics), squeeze=False).ravel()
    for ax, metric in zip(axes, metrics):
        if not any(found.seeds for row in rows for by_metric in row.intervals.values()
                   if (found := by_metric.get(metric)) is not None):
            ax.text(0.5, 0.5, "no score\n(no object word generated)" if metric == "attention_accuracy" else
                    "no score", ha="center", va="center", transform=ax.transAxes)
        for row in rows:
            sizes = list(row.intervals)
            found = [row.intervals[size].get(metric) for size in sizes]
            means = [float("nan") if interval is None else 100 * interval.mean for interval in found]
            halves = [0.0 if interval is None or interval.half_width is None else 100 * interval.half_width
                      for interval in found]
            line = ax.errorbar(sizes, means, yerr=halves if any(halves) else None, marker="o", markersize=4,
                               capsize=3, label=row_label(row))
            if len(row.runs) > 1:  # each seed's own score: a seed unlike the others shows as itself
                runs = [(size, 100 * value) for size in sizes for value in row.scores[size].get(metric, [])]
                ax.scatter(*zip(*runs), s=22, alpha=0.6, color=line.lines[0].get_color(), edgecolors="white",
                           linewidths=0.5, zorder=3)
        if metric != "cider":  # a share: an interval past 0 or 100% says how unsure it is, not where it could be
            ax.set_ylim(max(-2.0, ax.get_ylim()[0]), min(102.0, ax.get_ylim()[1]))
        ax.set_title(METRIC_NAMES[metric])
        ax.set_xlabel("beam size")
        ax.set_ylabel("%")
        ax.set_xlim(every[0] - 0.3, every[-1] + 0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    return figure


def beam_sizes_json(rows: list[BeamSizeRow], *, split: str, images: int) -> dict[str, Any]:
    """What DIR/beam_sizes.json holds."""
    models = []
    for row in rows:
        scores = []
        for size, intervals in row.intervals.items():
            scores.append({"beam_size": size} | {
                metric: interval_json(found) | {"runs": [number(value) for value in row.scores[size][metric]]}
                for metric, found in intervals.items()})
        models.append({"name": row.name, "runs": row.runs, "scores": scores})
    sizes = sorted({size for row in rows for size in row.intervals})
    return {"split": split, "images": images, "beam_sizes": sizes, "metrics": swept_metrics(rows),
            "interval": INTERVAL, "models": models}


def write_beam_sizes(rows: list[BeamSizeRow], *, split: str, images: int, out: Path) -> tuple[Path, Path]:
    """DIR/beam_sizes.json (`beam_sizes_json`) and DIR/beam_sizes.png (`beam_sizes_figure`)."""
    data = beam_sizes_json(rows, split=split, images=images)
    write_text(out / JSON_FILE, json_text(data, indent=2) + "\n")
    save_figure(beam_sizes_figure(rows), out / FIGURE_FILE)
    return out / JSON_FILE, out / FIGURE_FILE
