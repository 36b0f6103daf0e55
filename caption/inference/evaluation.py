"""Caption a whole split and score it with the coco-caption metrics, as the paper reports them.

Captions are decoded in batches from the data module's loader (images, or annotations from a feature
cache) and scored by pycocoevalcap's own scorers after its PTB tokenizer (`caption.metrics`), with the mean
entropy of α per step. On data with object boxes (the built-in data, COCO with its instances files) the
localisation report is added: where each object noun's attention peak lies, beside the scores of a random location
and of a random object, and the accuracy per label (category); images without boxes are not scored.
`caption evaluate` and `caption compare` are this plus files.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import instantiate_module
from tqdm import tqdm

from caption.data.datamodule import CaptionDataModule
from caption.decoding import Caption
from caption.errors import ConfigError
from caption.inference.captioner import Captioner
from caption.metrics import METRICS, PTB_JAVA, Localisation, coco_scores, localisation, mean_entropy, step_entropy
from caption.outputs import writable_folder, write_text

METRIC_NAMES = {
    "bleu1": "BLEU-1", "bleu2": "BLEU-2", "bleu3": "BLEU-3", "bleu4": "BLEU-4",
    "meteor": "METEOR", "rouge_l": "ROUGE-L", "cider": "CIDEr", "attention_accuracy": "attention accuracy",
    "attention_other_object": "peak on another object", "attention_background": "peak on the background",
    "attention_absent": "noun of an absent object", "attention_chance_location": "random location",
    "attention_chance_object": "random object", "alpha_entropy": "α entropy per step (nats)",
}


@dataclass
class Evaluation:
    """Scores of one model on one split, with its captions."""

    split: str
    beam_size: int
    scores: dict[str, float]  # METRICS names -> score, NaN when missing (METEOR without Java)
    captions: dict[int, Caption] = field(repr=False)  # image id -> caption, in the loader's order
    localisation: Localisation | None = None  # None when the data has no object boxes
    alpha_entropy: float = float("nan")  # mean H(α_t) over generated steps
    tokenizer: str = PTB_JAVA  # caption.metrics.PTB_JAVA (official) or PTB_PYTHON (the stand-in, without Java)

    def attention_scores(self) -> dict[str, float]:
        """α entropy and, with boxes, the localisation shares, under their logged names."""
        found = {} if self.localisation is None else self.localisation.scores()
        return found | {"alpha_entropy": self.alpha_entropy}

    def metrics(self) -> dict[str, Any]:
        """What metrics.json holds; missing scores are null."""
        scores = self.scores | self.attention_scores()
        return {
            "split": self.split,
            "beam_size": self.beam_size,
            "images": len(self.captions),
            "tokenizer": self.tokenizer,
            "object_words": 0 if self.localisation is None else self.localisation.nouns,
            "metrics": {name: None if math.isnan(value) else value for name, value in scores.items()},
            "attention_by_label": {} if self.localisation is None else {
                label: asdict(found) for label, found in self.localisation.by_label.items()},
        }

    def table(self) -> str:
        """The scores as a two-column text table, in %."""
        rows = [(METRIC_NAMES[name], format_score(self.scores[name])) for name in METRICS]
        if self.localisation is not None:
            for name, value in self.localisation.scores().items():
                words = f" ({self.localisation.nouns} object words)" if name == "attention_accuracy" else ""
                rows.append((METRIC_NAMES[name], format_score(value) + words))
            if self.localisation.by_label:
                rows.append(("attention accuracy per label", ""))
            for label, found in self.localisation.by_label.items():
                chance = format_score(found.chance_location)
                rows.append((f"  {label}", f"{format_score(found.accuracy)} ({found.nouns} words; random location {chance})"))
        rows.append((METRIC_NAMES["alpha_entropy"], f"{self.alpha_entropy:.2f}"))
        official = "" if self.tokenizer == PTB_JAVA else " (no Java: close to, not exactly, the official scores)"
        header = (f"{self.split} split, {len(self.captions)} images, beam {self.beam_size}, "
                  f"tokenizer {self.tokenizer}{official} (%)")
        width = max(len(name) for name, _ in rows)
        return "\n".join([header, *(f"  {name:<{width}}  {value}" for name, value in rows)])


def format_score(value: float | None) -> str:
    """A score in % with one decimal, or "missing"."""
    return "missing" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def build_data(settings: dict[str, Any], origin: str) -> CaptionDataModule:
    """The data module described by `settings` (as in a config's `data:` section)."""
    try:
        return instantiate_module(CaptionDataModule, settings)
    except Exception as error:
        raise ConfigError(f"invalid data settings from {origin}: {error}") from error


def training_data(captioner: Captioner) -> CaptionDataModule:
    """The data module of the data the captioner's model was trained on (or of the config it was loaded with)."""
    if captioner.data is None:
        raise ConfigError("the checkpoint does not record its data settings: pass the training config (--config)")
    return build_data(*captioner.data)


def evaluate(
    captioner: Captioner,
    data: CaptionDataModule,
    *,
    split: str = "test",
    beam_size: int | None = None,
    max_length: int | None = None,
    meteor_timeout: float = 120.0,
    description: str = "decoding",
    out: Path | None = None,
) -> Evaluation:
    """Caption every image of `split` in batches and score the captions against the raw references.

    With `out`, the captions are written to out/captions.json before scoring, so they survive a failure there.
    """
    beam_size = captioner.module.settings.decoding.beam_size if beam_size is None else beam_size
    data.setup("test" if split == "test" else "validate")
    loader = data.test_dataloader() if split == "test" else data.val_dataloader()
    records = {record.image_id: record for record in data.usable(split)}  # what the loader yields
    captions: dict[int, Caption] = {}
    with tqdm(total=len(records), desc=description, unit="image") as progress:
        for batch in loader:
            batch = data.count_skipped(batch)
            captions.update(zip(batch["image_id"].tolist(), captioner.caption_batch(batch, beam_size=beam_size,
                                                                                      max_length=max_length)))
            progress.update(len(batch["image_id"]))
    data.report_skipped()
    if out is not None:
        write_captions(captions, out)
    scores, tokenizer = coco_scores(
        {image_id: caption.text for image_id, caption in captions.items()},
        {image_id: list(records[image_id].references) for image_id in captions},
        meteor_timeout=meteor_timeout,
    )
    found = None
    boxes = {image_id: data.source.input_boxes(records[image_id]) for image_id in captions}  # input frame
    boxed = [(caption.words, caption.alpha, boxes[image_id]) for image_id, caption in captions.items() if boxes[image_id]]
    if boxed:
        found = localisation(boxed, image_size=tuple(data.source.image_size), word_labels=data.source.word_labels)
    entropy = mean_entropy(step_entropy(caption.alpha) for caption in captions.values())
    return Evaluation(split, beam_size, scores, captions, found, entropy, tokenizer)


def write_captions(captions: dict[int, Caption], out: Path) -> None:
    """DIR/captions.json, in the COCO results format [{"image_id", "caption"}]."""
    results = [{"image_id": image_id, "caption": caption.text} for image_id, caption in captions.items()]
    write_text(writable_folder(out, what="output") / "captions.json", json.dumps(results, indent=1) + "\n")


def write_evaluation(evaluation: Evaluation, out: Path, **about: Any) -> None:
    """DIR/metrics.json (with `about`, e.g. the checkpoint) and DIR/captions.json (COCO results format)."""
    write_captions(evaluation.captions, out)
    write_text(out / "metrics.json", json.dumps({**about, **evaluation.metrics()}, indent=2) + "\n")
