"""`caption evaluate`: the coco-caption metrics of a checkpoint on a split, as the paper reports them.

    caption evaluate --ckpt runs/shapes_soft/checkpoints/last.ckpt --split test --out eval/soft

Captions are decoded in batches (beam search across images) and scored by pycocoevalcap's own
scorers after its PTB tokenizer has tokenised generated and reference captions alike (BLEU-1..4,
METEOR, ROUGE-L, CIDEr-D). On data with object boxes (the built-in data) the attention accuracy is
added: the share of object words whose attention peak lies inside the named object's box.

Writes DIR/captions.json (the COCO results format, [{"image_id", "caption"}]) as soon as the split is
decoded, then DIR/metrics.json, which also names the tokenizer: coco-caption's PTB tokenizer (Java),
or its pure-Python stand-in without Java. DIR is created and checked writable before any work.
The data comes from the checkpoint (`caption fit` stores the data settings in it) or from
`--config`, a YAML file with a `data:` section such as the training config.
"""

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch.cli import instantiate_module
from torch import Tensor
from tqdm import tqdm

from caption.checkpoints import load_module, read_checkpoint
from caption.data.datamodule import CaptionDataModule
from caption.data.records import ImageRecord
from caption.errors import ConfigError
from caption.metrics import METRICS, PTB_JAVA, attention_accuracy, chance_attention_accuracy, coco_scores
from caption.module import CaptionModule
from caption.outputs import writable_folder, write_text

METRIC_NAMES = {
    "bleu1": "BLEU-1", "bleu2": "BLEU-2", "bleu3": "BLEU-3", "bleu4": "BLEU-4",
    "meteor": "METEOR", "rouge_l": "ROUGE-L", "cider": "CIDEr", "attention_accuracy": "attention accuracy",
    "attention_accuracy_chance": "random location",
}


@dataclass
class Generated:
    """One generated caption and what the model looked at for each of its words."""

    image_id: int
    words: list[str]  # without <end>
    alpha: Tensor  # attention weights for each word     (T, L)
    beta: Tensor  # gate β for each word                 (T,)
    location: Tensor | None  # hard: chosen location s_t  (T,)

    @property
    def caption(self) -> str:
        return " ".join(self.words)


@dataclass
class Evaluation:
    """Scores of one model on one split, with its captions."""

    split: str
    beam_size: int
    scores: dict[str, float]  # METRICS names -> score, NaN when missing (METEOR without Java)
    attention_accuracy: float | None  # None when the data has no object boxes
    object_words: int  # generated words that name an object (attention accuracy's denominator)
    generated: list[Generated] = field(repr=False)
    attention_accuracy_chance: float | None = None  # the same words, a uniformly random location
    tokenizer: str = PTB_JAVA  # caption.metrics.PTB_JAVA (official) or PTB_PYTHON (the stand-in, without Java)

    def metrics(self) -> dict[str, Any]:
        """What metrics.json holds; missing scores are null."""
        scores = dict(self.scores)
        if self.attention_accuracy is not None:
            scores["attention_accuracy"] = self.attention_accuracy
            scores["attention_accuracy_chance"] = self.attention_accuracy_chance
        return {
            "split": self.split,
            "beam_size": self.beam_size,
            "images": len(self.generated),
            "tokenizer": self.tokenizer,
            "object_words": self.object_words,
            "metrics": {name: None if math.isnan(value) else value for name, value in scores.items()},
        }


def data_config(checkpoint: dict[str, Any], path: str | Path, config: str | None) -> tuple[dict[str, Any], str]:
    """The data settings ({source: {class_path, init_args}, ...}) and where they come from."""
    if config is not None:
        try:
            settings = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"cannot read config {config}: {error}") from error
        if not isinstance(settings, dict) or not isinstance(settings.get("data"), dict):
            raise ConfigError(f"config {config} has no `data:` section (use the config the model was trained with)")
        # linked from the model, as `caption fit` does: a feature cache is checked against the encoder
        linked = {key: checkpoint["hyper_parameters"][key] for key in ("encoder", "encoder_weights", "freeze_encoder")}
        return {**settings["data"], **linked}, str(config)
    settings = checkpoint.get("datamodule_hyper_parameters")
    if not isinstance(settings, dict) or not isinstance(settings.get("source"), dict):
        saved = sorted(Path(path).parent.parent.rglob("config.yaml"), key=lambda file: file.stat().st_mtime)
        raise ConfigError(
            f"checkpoint {path} does not record its data (written before data settings were stored, or "
            "outside `caption fit`): pass --config with the training config"
            + (f", e.g. --config {saved[-1]} (saved by that run)" if saved else "")
        )
    return {key: value for key, value in settings.items() if key != "_instantiator"}, str(path)


def build_data(settings: dict[str, Any], origin: str) -> CaptionDataModule:
    """The data module described by `settings` (as in a config's `data:` section)."""
    try:
        return instantiate_module(CaptionDataModule, settings)
    except Exception as error:
        raise ConfigError(f"invalid data settings from {origin}: {error}") from error


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def pick_device(name: str) -> torch.device:
    """"auto" is the GPU when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ConfigError(f"--device {name}: {error}") from None
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"--device {name}: this machine has {torch.cuda.device_count()} visible GPUs")
    return device


@torch.inference_mode()
def generate(module: CaptionModule, batch: dict[str, Any], *, beam_size: int) -> list[Generated]:
    """Captions for a batch ({"image" (B, 3, H, W) or "annotations" (B, L, D), "image_id" (B,)})."""
    device = module.device
    batch = {key: value.to(device) if isinstance(value, Tensor) else value for key, value in batch.items()}
    decoded = module.generate(module.annotations(batch), beam_size=beam_size)
    generated = []
    for row, image_id in enumerate(batch["image_id"].tolist()):
        words = module.vocabulary.decode(decoded.tokens[row])
        length = len(words)
        alpha, beta = decoded.alpha[row, :length].float().cpu(), decoded.beta[row, :length].float().cpu()
        location = None if decoded.location is None else decoded.location[row, :length].cpu()
        generated.append(Generated(image_id, words, alpha, beta, location))
    return generated


def evaluate(
    module: CaptionModule,
    data: CaptionDataModule,
    *,
    split: str = "test",
    beam_size: int | None = None,
    meteor_timeout: float = 120.0,
    description: str = "decoding",
    out: Path | None = None,
) -> Evaluation:
    """Caption every image of `split` in batches and score the captions against the raw references.

    With `out`, the captions are written to out/captions.json before scoring, so they survive a failure there.
    """
    beam_size = module.hparams.beam_size if beam_size is None else beam_size
    data.setup("test" if split == "test" else "validate")
    loader = data.test_dataloader() if split == "test" else data.val_dataloader()
    records = {record.image_id: record for record in data.usable(split)}  # what the loader yields
    generated: list[Generated] = []
    with tqdm(total=len(records), desc=description, unit="image") as progress:
        for batch in loader:
            generated.extend(generate(module, data.count_skipped(batch), beam_size=beam_size))
            progress.update(len(batch["image_id"]))
    data.report_skipped()
    if out is not None:
        write_captions(generated, out)
    scores, tokenizer = coco_scores(
        {g.image_id: g.caption for g in generated},
        {g.image_id: list(records[g.image_id].references) for g in generated},
        meteor_timeout=meteor_timeout,
    )
    accuracy, chance, object_words = None, None, 0
    if all(record.objects for record in records.values()):
        image_size = image_size_of(data, records[generated[0].image_id])
        boxed = [(g.words, g.alpha, records[g.image_id].objects) for g in generated]
        accuracy, object_words = attention_accuracy(boxed, image_size=image_size)
        chance = chance_attention_accuracy(boxed, image_size=image_size)
    return Evaluation(split, beam_size, scores, accuracy, object_words, generated, chance, tokenizer)


def image_size_of(data: CaptionDataModule, record: ImageRecord) -> tuple[int, int]:
    """(H, W) of the encoder input for `record`: the pixel frame of its object boxes."""
    height, width = data.source.image(record).shape[-2:]
    return int(height), int(width)


def write_captions(generated: list[Generated], out: Path) -> None:
    """DIR/captions.json, in the COCO results format."""
    results = [{"image_id": g.image_id, "caption": g.caption} for g in generated]
    write_text(writable_folder(out, what="output") / "captions.json", json.dumps(results, indent=1) + "\n")


def write_evaluation(evaluation: Evaluation, out: Path, **about: Any) -> None:
    """DIR/metrics.json (with `about`, e.g. the checkpoint) and DIR/captions.json (COCO results format)."""
    write_captions(evaluation.generated, out)
    write_text(out / "metrics.json", json.dumps({**about, **evaluation.metrics()}, indent=2) + "\n")


def format_score(value: float | None) -> str:
    """A score in % with one decimal, or "missing"."""
    return "missing" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def metrics_table(evaluation: Evaluation) -> str:
    """The scores as a two-column text table, in %."""
    rows = [(METRIC_NAMES[name], format_score(evaluation.scores[name])) for name in METRICS]
    if evaluation.attention_accuracy is not None:
        words = f" ({evaluation.object_words} object words)"
        rows.append((METRIC_NAMES["attention_accuracy"], format_score(evaluation.attention_accuracy) + words))
        rows.append((METRIC_NAMES["attention_accuracy_chance"], format_score(evaluation.attention_accuracy_chance)))
    official = "" if evaluation.tokenizer == PTB_JAVA else " (no Java: close to, not exactly, the official scores)"
    header = (f"{evaluation.split} split, {len(evaluation.generated)} images, beam {evaluation.beam_size}, "
              f"tokenizer {evaluation.tokenizer}{official} (%)")
    width = max(len(name) for name, _ in rows)
    return "\n".join([header, *(f"  {name:<{width}}  {value}" for name, value in rows)])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="caption evaluate",
        description="Score a checkpoint's captions on a split with coco-caption's metrics (pycocoevalcap).",
    )
    parser.add_argument("--ckpt", required=True, help="checkpoint written by `caption fit`")
    parser.add_argument("--split", default="test", choices=("val", "test"), help="split to caption (default: test)")
    parser.add_argument("--beam-size", type=positive_int, default=None, help="beam width (default: the checkpoint's)")
    parser.add_argument("--out", required=True, type=Path, help="folder for metrics.json and captions.json")
    parser.add_argument("--config", default=None, help="YAML with a `data:` section (default: the checkpoint's data)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="images per batch (default: the data's eval_batch_size)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_argument("--meteor-timeout", type=float, default=120.0, help="seconds before METEOR counts as missing")
    args = parser.parse_args(argv)
    writable_folder(args.out, what="--out")  # errors (CaptionError) are printed in one line by `caption`
    checkpoint = read_checkpoint(args.ckpt)
    module = load_module(args.ckpt, checkpoint).to(pick_device(args.device))
    data = build_data(*data_config(checkpoint, args.ckpt, args.config))
    if args.batch_size is not None:
        data.eval_batch_size = args.batch_size
    evaluation = evaluate(
        module, data, split=args.split, beam_size=args.beam_size, meteor_timeout=args.meteor_timeout, out=args.out
    )
    write_evaluation(evaluation, args.out, checkpoint=str(args.ckpt))
    print(metrics_table(evaluation))
    print(f"wrote {args.out / 'metrics.json'} and {args.out / 'captions.json'}")
