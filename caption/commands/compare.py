"""`caption compare`: several models (soft vs hard attention) on the same split, in one report.

    caption compare runs/shapes_soft runs/shapes_hard --out reports/shapes

Each model is evaluated as `caption evaluate` does (`caption.inference.evaluate`), all on the same data and split (the first
checkpoint's data, or `--config`). DIR/report.md then holds a table laid out like the paper's
Table 1 (BLEU-1..4, METEOR, in %) plus ROUGE-L, CIDEr-D and attention accuracy, with the paper's
own numbers for the same dataset beside them where it has some (none for the built-in data);
figures of the same images captioned by each model, overlays side by side (DIR/overlays-<id>.png);
and training curves from each run's CSV logs when present (DIR/curves.png). Each model's
metrics.json and captions.json go to DIR/<name>/.

A run folder (e.g. `runs/shapes_soft`) stands for its newest model-selection checkpoint
(`best-*.ckpt`, else `last.ckpt`) and the newest `metrics.csv` of its logs.
"""

import argparse
import csv
import datetime
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from caption.checkpoints import find_checkpoint
from caption.commands.common import add_batch_size, add_decoding, add_device, add_scoring
from caption.data.datamodule import CaptionDataModule
from caption.errors import ConfigError
from caption.inference import Captioner, Evaluation, build_data, evaluate, write_evaluation
from caption.inference.evaluation import METRIC_NAMES, format_score
from caption.metrics import METRICS, named_labels
from caption.module import ModuleSettings
from caption.outputs import save_figure, writable_folder, write_text
from caption.visualize import Overlay, comparison_figure, to_uint8

# Xu et al. (2015), Table 1: BLEU-1, BLEU-2, BLEU-3, BLEU-4, METEOR in %, as printed.
PAPER_TABLE_1: dict[str, dict[str, tuple[str, ...]]] = {
    "flickr8k": {"soft": ("67", "44.8", "29.9", "19.5", "18.93"), "hard": ("67", "45.7", "31.4", "21.3", "20.30")},
    "flickr30k": {"soft": ("66.7", "43.4", "28.8", "19.1", "18.49"), "hard": ("66.9", "43.9", "29.6", "19.9", "18.46")},
    "coco": {"soft": ("70.7", "49.2", "34.4", "24.3", "23.90"), "hard": ("71.8", "50.4", "35.7", "25.0", "23.04")},
}
PAPER_METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor")
DATASETS = ("flickr30k", "flickr8k", "coco", "shapes")  # looked for in the data settings, in this order
CURVES = ("train/nll", "val/bleu4", "val/cider", "val/attention_accuracy", "val/alpha_entropy")  # logged columns drawn when a run has them


@dataclass
class Model:
    """One model to compare."""

    name: str  # label in the report
    checkpoint: Path
    captioner: Captioner
    metrics_csv: Path | None  # the run's CSVLogger log, if found

    @property
    def settings(self) -> ModuleSettings:
        return self.captioner.module.settings

    @property
    def source(self) -> dict[str, Any] | None:
        """The data source it was trained on ({class_path, init_args}), if recorded."""
        return None if self.captioner.data is None else self.captioner.data[0]["source"]


def newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda path: path.stat().st_mtime, default=None)


def find_metrics_csv(path: Path, checkpoint: Path) -> Path | None:
    """The newest metrics.csv under the run folder (or around the checkpoint, two levels up)."""
    root = path if path.is_dir() else checkpoint.parent.parent
    return newest(list(root.rglob("metrics.csv")))


def model_names(captioners: list[Captioner], names: list[str] | None) -> list[str]:
    """`names` if given, else the attention kind ("soft", "hard"), numbered when it repeats."""
    if names is not None:
        if len(names) != len(captioners) or len(set(names)) != len(names):
            raise ConfigError(f"--names needs {len(captioners)} distinct names, one per model; got {names}")
        return names
    kinds = [captioner.module.settings.attention.kind for captioner in captioners]
    return [kind if kinds.count(kind) == 1 else f"{kind}-{kinds[:i].count(kind) + 1}" for i, kind in enumerate(kinds)]


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


def write_report(models: list[Model], evaluations: list[Evaluation], *, dataset: str | None, split: str,
                 figures: list[Path], curves: Path | None, out: Path) -> Path:
    """DIR/report.md: the results table, the overlay figures, the curves and where each model came from."""
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
    if curves is not None:
        lines += ["## Training curves", "", f"![training curves]({curves.name})", ""]
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


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="caption compare",
        description="Evaluate several models on the same split and write report.md with tables and figures.",
    )
    parser.add_argument("models", nargs="+", type=Path, metavar="CKPT_OR_RUN", help="checkpoints or run folders")
    parser.add_argument("--out", required=True, type=Path, help="folder for report.md, figures and per-model results")
    parser.add_argument("--config", default=None, help="YAML with a `data:` section (default: the first checkpoint's)")
    parser.add_argument("--names", nargs="+", default=None, help="a name per model (default: soft, hard, ...)")
    parser.add_argument("--images", type=int, default=3, help="images shown with each model's overlays (default: 3)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="dataset for the paper's numbers (default: guessed from the data settings)")
    add_decoding(parser, default="each checkpoint's")
    add_batch_size(parser, default=None)
    add_device(parser)
    add_scoring(parser)
    args = parser.parse_args(argv)
    if args.images < 0:
        parser.error(f"--images must be >= 0, got {args.images}")
    writable_folder(args.out, what="--out")  # errors (CaptionError) are printed in one line by `caption`
    paths = [find_checkpoint(path) for path in args.models]
    captioners = [Captioner.from_checkpoint(path, device=args.device, config=args.config) for path in paths]
    names = model_names(captioners, args.names)
    models = [Model(name, path, captioner, find_metrics_csv(given, path))
              for name, path, captioner, given in zip(names, paths, captioners, args.models)]
    if captioners[0].data is None:
        raise ConfigError(f"checkpoint {paths[0]} does not record its data: pass the training config (--config)")
    settings, origin = captioners[0].data
    for model in models[1:]:
        if args.config is None and model.source is not None and model.source != settings["source"]:
            warnings.warn(f"{model.name} was trained on other data than {models[0].name}; "
                          "all are evaluated on the latter")
    data = build_data(settings, origin)
    if args.batch_size is not None:
        data.eval_batch_size = args.batch_size
    evaluations = []
    for model in models:
        evaluation = evaluate(model.captioner, data, split=args.split, beam_size=args.beam_size,
                              max_length=args.max_length, meteor_timeout=args.meteor_timeout, description=model.name,
                              out=args.out / model.name)
        write_evaluation(evaluation, args.out / model.name, checkpoint=str(model.checkpoint))
        evaluations.append(evaluation)
    figures = overlay_figures(models, evaluations, data, args.split, args.images, args.out)
    curves = curves_figure(models)
    curves_path = None
    if curves is not None:
        curves_path = args.out / "curves.png"
        save_figure(curves, curves_path)
    dataset = args.dataset or dataset_name(settings)
    report = write_report(models, evaluations, dataset=dataset, split=args.split, figures=figures,
                          curves=curves_path, out=args.out)
    print(results_table(models, evaluations, dataset))
    print(f"wrote {report}")
