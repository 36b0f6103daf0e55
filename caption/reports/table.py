"""`caption compare`'s report.md: a results table laid out like the paper's Table 1, with the paper's own numbers
for the same dataset beside ours, the figures, and where each model came from."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

from caption.reports import DATASETS
from caption.reports.runs import Model
from caption.evaluation.metrics import METRICS
from caption.evaluation.report import METRIC_NAMES, Evaluation, format_score
from caption.io.outputs import write_text

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


def results_table(models: list[Model], evaluations: list[Evaluation], dataset: str | None) -> str:
    """Markdown table like the paper's Table 1, ours first, then the paper's rows for this dataset."""
    attention = list(dict.fromkeys(name for evaluation in evaluations for name in evaluation.attention_scores()))
    columns = [*METRICS, *sorted(attention, key=lambda name: name == "alpha_entropy")]  # the entropy last
    lines = [
        "| model | " + " | ".join(METRIC_NAMES[name] for name in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for model, evaluation in zip(models, evaluations):
        scores = evaluation.scores | evaluation.attention_scores()
        cells = ["–" if scores.get(name) is None or name == "alpha_entropy" and math.isnan(scores[name])
                 else f"{scores[name]:.2f}" if name == "alpha_entropy" else format_score(scores[name])
                 for name in columns]
        lines.append(f"| {model.name} (ours) | " + " | ".join(cells) + " |")
    paper = PAPER_TABLE_1.get(dataset or "", {})
    for kind in dict.fromkeys(model.settings.attention.kind for model in models):
        if kind in paper:
            cells = [*paper[kind], *["–"] * (len(columns) - len(PAPER_METRICS))]
            lines.append(f"| {kind} (paper, Table 1) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(models: list[Model], evaluations: list[Evaluation], *, dataset: str | None, split: str,
                 figures: list[Path], curves: Path | None, curves_left_out: dict[str, str], out: Path) -> Path:
    """DIR/report.md: the results table, the overlay figures, the curves (and the models left out of them, with
    why) and where each model came from."""
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
        results_table(models, evaluations, dataset),
        "",
        "## Captions and attention",
        "",
        *(f"![{path.stem}]({path.name})" for path in figures),
        "",
    ]
    if curves is not None or curves_left_out:
        lines += ["## Training curves", ""]
        lines += [] if curves is None else [f"![training curves]({curves.name})", ""]
        lines += [f"- {name}: not drawn, {why}" for name, why in curves_left_out.items()]
        lines += [""] if curves_left_out else []
    lines += ["## Models", ""]
    for model, evaluation in zip(models, evaluations):
        settings = model.settings
        words = "" if evaluation.localisation is None else f", {evaluation.localisation.nouns} object words"
        lines.append(
            f"- **{model.name}**: `{model.checkpoint}` ({settings.attention.kind} attention, {settings.encoder.name} encoder, "
            f"beam {evaluation.beam_size}{words}); metrics and captions in `{model.name}/`"
        )
    path = out / "report.md"
    write_text(path, "\n".join(lines) + "\n")
    return path
