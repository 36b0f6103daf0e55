"""`caption compare`'s report.md: a results table laid out like the paper's Table 1, with the paper's own numbers
for the same dataset beside ours, the figures, and where each model came from; with groups of runs (seeds,
`caption.reports.seeds`), a row per group with each metric's interval over its seeds, the paired tests and a table
of every run."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

from caption.reports import DATASETS
from caption.reports.beam_sizes import BeamSizeRow, beam_size_section
from caption.reports.intervals import SeedInterval
from caption.reports.runs import Model
from caption.reports.seeds import INTERVAL, PAIRED_TEST, SeedComparison, p_value, side_by_side, verdict
from caption.evaluation.metrics import METRICS
from caption.evaluation.report import METRIC_NAMES, Evaluation, format_score
from caption.io.outputs import write_text
from caption.io.provenance import Provenance

# Xu et al. (2015), Table 1: BLEU-1, BLEU-2, BLEU-3, BLEU-4, METEOR in %, as printed.
PAPER_TABLE_1: dict[str, dict[str, tuple[str, ...]]] = {
    "flickr8k": {"soft": ("67", "44.8", "29.9", "19.5", "18.93"), "hard": ("67", "45.7", "31.4", "21.3", "20.30")},
    "flickr30k": {"soft": ("66.7", "43.4", "28.8", "19.1", "18.49"), "hard": ("66.9", "43.9", "29.6", "19.9", "18.46")},
    "coco": {"soft": ("70.7", "49.2", "34.4", "24.3", "23.90"), "hard": ("71.8", "50.4", "35.7", "25.0", "23.04")},
}
PAPER_METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor")


def dataset_name(settings: dict[str, Any]) -> str | None:
    """Which dataset the data settings describe ("coco", "flickr8k", ...), found by name in them."""
    text = json.dumps(settings).lower()
    return next((name for name in DATASETS if name in text), None)


def table_columns(evaluations: list[Evaluation]) -> list[str]:
    """The table's metrics: the coco-caption ones, then where attention looked, α entropy last."""
    attention = list(dict.fromkeys(name for evaluation in evaluations for name in evaluation.attention_scores()))
    return [*METRICS, *sorted(attention, key=lambda name: name == "alpha_entropy")]


def table_header(columns: list[str], first: str = "model") -> list[str]:
    return ["| " + first + " | " + " | ".join(METRIC_NAMES[name] for name in columns) + " |",
            "|---|" + "---:|" * len(columns)]


def paper_rows(models: list[Model], dataset: str | None, columns: list[str]) -> list[str]:
    """The paper's Table 1 rows of this dataset, for the attention kinds of `models`."""
    paper = PAPER_TABLE_1.get(dataset or "", {})
    lines = []
    for kind in dict.fromkeys(model.settings.attention.kind for model in models):
        if kind in paper:
            cells = [*paper[kind], *["–"] * (len(columns) - len(PAPER_METRICS))]
            lines.append(f"| {kind} (paper, Table 1) | " + " | ".join(cells) + " |")
    return lines


def score_cell(name: str, value: float | None) -> str:
    """A score as the table shows it: in % (`format_score`), α entropy in nats; "–" when missing."""
    if value is None or name == "alpha_entropy" and math.isnan(value):
        return "–"
    return f"{value:.2f}" if name == "alpha_entropy" else format_score(value)


def results_table(models: list[Model], evaluations: list[Evaluation], dataset: str | None, *,
                  paper: bool = True) -> str:
    """Markdown table like the paper's Table 1, ours first, then (with `paper`) the paper's rows for this dataset."""
    columns = table_columns(evaluations)
    lines = table_header(columns)
    for model, evaluation in zip(models, evaluations):
        scores = evaluation.scores | evaluation.attention_scores()
        lines.append(f"| {model.name} (ours) | " + " | ".join(score_cell(name, scores.get(name)) for name in columns)
                     + " |")
    return "\n".join(lines + (paper_rows(models, dataset, columns) if paper else []))


def interval_cell(name: str, found: SeedInterval | None, seeds: int) -> str:
    """mean ± half-width in the table's units ("84.0 ± 9.9"; "84.0" for one seed), the seeds counted when fewer than
    the group's (a missing score)."""
    if found is None or found.seeds == 0:
        return "–"
    scale = (lambda value: f"{value:.2f}") if name == "alpha_entropy" else format_score
    cell = scale(found.mean) + ("" if found.half_width is None else f" ± {scale(found.half_width)}")
    return cell + (f" ({found.seeds} seed{'s' * (found.seeds > 1)})" if found.seeds < seeds else "")


def grouped_table(comparison: SeedComparison, dataset: str | None) -> str:
    """The table of `results_table` with a row per group: each metric's mean over the group's seeds ± the half-width
    of its 95% Student-t interval, then the paper's rows."""
    columns = table_columns([evaluation for group in comparison.groups for evaluation in group.evaluations])
    lines = table_header(columns, first="group")
    for group in comparison.groups:
        seeds = len(group.evaluations)
        label = f"{group.name} (ours, {seeds} seeds)" if seeds > 1 else f"{group.name} (ours, 1 seed: no interval)"
        lines.append(f"| {label} | " + " | ".join(interval_cell(name, group.intervals.get(name), seeds)
                                                  for name in columns) + " |")
    models = [model for group in comparison.groups for model in group.group.models]
    return "\n".join(lines + paper_rows(models, dataset, columns))


def paired_table(comparison: SeedComparison) -> str:
    """The paired tests, B − A in points of the table's %: a row each, then each one's verdict in words."""
    lines = ["| metric | B − A | difference | 95% interval | p | ν | speaks for |", "|---|---|---:|---:|---:|---:|---|"]
    for pairing in comparison.pairings:
        test = pairing.test
        cells = ["–"] * 5 if test is None else [
            f"{100 * test.difference:+.2f}", f"[{100 * test.low:.2f}, {100 * test.high:.2f}]", p_value(test),
            f"{test.degrees_of_freedom:.1f}", "the recipes" if test.scope == "recipes" else "these models (one seed)"]
        lines.append(f"| {METRIC_NAMES[pairing.metric]} | {pairing.b} − {pairing.a} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *(f"- {verdict(pairing)}" for pairing in comparison.pairings)])


def seeds_sections(comparison: SeedComparison, models: list[Model], evaluations: list[Evaluation]) -> list[str]:
    """report.md's lines on the seeds: how the intervals are made, the paired tests, and every run's scores."""
    return [
        f"± is the half-width of the {INTERVAL}.",
        "",
        "## Paired test",
        "",
        f"Each later group against the first, on the same test images: {PAIRED_TEST}. Differences in points of the "
        "table's %; ν the degrees of freedom.",
        "",
        paired_table(comparison),
        "",
        "## Runs",
        "",
        results_table(models, evaluations, None, paper=False),
        "",
    ]


def beside_greedy(models: list[Model], evaluations: list[Evaluation], seeds: SeedComparison | None) -> list[str]:
    """A line per model (per group, with its seeds' intervals): its beam's BLEU-4, CIDEr-D and attention accuracy
    beside greedy decoding's (`Evaluation.side_by_side`); what greedy decoding is itself says so."""
    if seeds is not None:
        found = [(group.name, side_by_side(group)) for group in seeds.groups]
    else:
        found = [(model.name, evaluation.side_by_side()) for model, evaluation in zip(models, evaluations)]
    return [f"- {name}: {line or 'greedy decoding itself'}" for name, line in found]


OVERLAY_MARKERS = ("Each word's panel: its attention α, upsampled and smoothed, over the grey image, on one colour "
                   "scale for every model; hard attention's cell for the word is outlined in cyan: argmax α, since at "
                   "test time hard attention takes the expectation over α as its context (no cell is sampled); the box "
                   "of the object the word names (on data with boxes) is dashed in lime, as the legend under the image "
                   "says.")
CURVES = ("The negative log-likelihood `train/nll` is the panel soft and hard attention share (their losses are "
          "different objectives); each objective's own terms have panels of their own, for the runs that log them; "
          "the dashed lines on the attention accuracy's panel are each run's chance levels at its last validation "
          "(random location, random object).")


def write_report(models: list[Model], evaluations: list[Evaluation], *, dataset: str | None, split: str,
                 figures: list[Path], curves: Path | None, curves_left_out: dict[str, str], out: Path,
                 seeds: SeedComparison | None = None, beam_sizes: list[BeamSizeRow] | None = None,
                 made: list[Provenance] | None = None, constant_curves: dict[str, float] | None = None) -> Path:
    """DIR/report.md: the results table, the overlay figures, the curves (and the models left out of them, with
    why, and the quantities of one constant value left out, `constant_curves`) and where each model came from, with
    how its figures were `made` (one `Provenance` a model); with `seeds`
    (groups of runs), the table by group with intervals over the seeds, the paired tests and every run's scores;
    with `beam_sizes`, the scores against the beam size (`caption.reports.beam_sizes`)."""
    images = len(evaluations[0].captions)
    paper = "the paper's numbers beside ours" if dataset in PAPER_TABLE_1 else "the paper has no numbers for this data"
    lines = [
        f"# Comparison on the {split} split of {dataset or 'the data'}",
        "",
        f"{datetime.date.today().isoformat()}: {images} images, coco-caption metrics from pycocoevalcap "
        f"({evaluations[0].tokenizer} tokenizer, BLEU-1..4, METEOR, ROUGE-L, CIDEr-D), all in %; {paper}. "
        "Attention accuracy: the share of generated object words whose attention peak lies inside the box of the "
        "object they name; the other shares say where the rest looked (another object, the background, or an object "
        "the image does not hold); random location and random object are the accuracy of a uniformly random grid "
        "cell and of a peak on a uniformly chosen object of the image; α entropy is the mean over generated words, "
        "in nats.",
        "",
        results_table(models, evaluations, dataset) if seeds is None else grouped_table(seeds, dataset),
        "",
        *([] if seeds is None else seeds_sections(seeds, models, evaluations)),
        "## Captions and attention",
        "",
        *([OVERLAY_MARKERS, ""] if figures else []),
        *(f"![{path.stem}]({path.name})" for path in figures),
        "",
    ]
    if curves is not None or curves_left_out:
        lines += ["## Training curves", ""]
        band = "" if seeds is None else ("A group of several runs: their mean, over the band from the lowest to the "
                                         "highest run at each step (min–max over seeds).")
        lines += [] if curves is None else [f"![training curves]({curves.name})", "", CURVES, "",
                                            *([band, ""] if band else [])]
        lines += [f"- {name}: not drawn, {why}" for name, why in curves_left_out.items()]
        lines += [""] if curves_left_out else []
        if constant_curves:
            lines += ["Left out, one constant value for every run at every step: " + ", ".join(
                f"`{name}` = {value:g}" for name, value in constant_curves.items()) + ".", ""]
    lines += ["## Beam search beside greedy decoding", "",
              "The same images decoded greedily, as validation decodes while fitting (in %):", "",
              *beside_greedy(models, evaluations, seeds), ""]
    lines += [] if beam_sizes is None else beam_size_section(beam_sizes)
    lines += ["## Models", ""]
    for model, evaluation, provenance in zip(models, evaluations, made or [None] * len(models)):
        settings = model.settings
        words = "" if evaluation.localisation is None else f", {evaluation.localisation.nouns} object words"
        lines.append(
            f"- **{model.name}**: `{model.checkpoint}` ({settings.attention.kind} attention, {settings.encoder.name} "
            f"encoder, beam {evaluation.beam_size}{words}); metrics and captions in `{model.name}/`"
            + ("" if provenance is None else f"; made with {provenance.line()}")
        )
    path = out / "report.md"
    write_text(path, "\n".join(lines) + "\n")
    return path
