"""`caption compare`'s figures: the same images captioned by each model, overlays side by side, and the training
curves of each run from its CSV logs."""

from __future__ import annotations

import csv
from pathlib import Path

from matplotlib.figure import Figure

from caption.comparison.models import Model
from caption.data.datamodule import CaptionDataModule
from caption.metrics import named_labels
from caption.outputs import save_figure
from caption.report import Evaluation
from caption.visualize import Overlay, comparison_figure, to_uint8

# logged columns drawn when a run has them
CURVES = ("train/nll", "val/bleu4", "val/cider", "val/attention_accuracy", "val/alpha_entropy")



def read_curves(path: Path) -> dict[str, list[tuple[int, float]]]:
    """{column: [(step, value)]} for the CURVES columns a CSVLogger metrics.csv has."""
    with path.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    curves = {
        name: [(int(row["step"]), float(row[name])) for row in rows if row.get(name) not in (None, "")]
        for name in CURVES
    }
    return {name: points for name, points in curves.items() if points}


def curves_figure(models: list[Model]) -> Figure | None:
    """One panel per logged quantity, one line per model; None when no run has logs."""
    curves = {model.name: read_curves(model.metrics_csv) for model in models if model.metrics_csv is not None}
    names = [name for name in CURVES if any(name in logged for logged in curves.values())]
    if not names:
        return None
    figure = Figure(figsize=(4.5 * len(names), 3.5), layout="constrained")
    for ax, name in zip(figure.subplots(1, len(names), squeeze=False)[0], names):
        for model_name, logged in curves.items():
            if name in logged:
                steps, values = zip(*logged[name])
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=model_name)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.legend()
    return figure


def write_curves(models: list[Model], out: Path) -> Path | None:
    """DIR/curves.png (`curves_figure`), or None when no run has logs."""
    figure = curves_figure(models)
    if figure is None:
        return None
    save_figure(figure, out / "curves.png")
    return out / "curves.png"


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
