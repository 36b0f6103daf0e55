"""`Evaluation`: the one report of a model on a split, as every command shows it (a table, metrics.json, logs).

Made by `caption.evaluation.score_split`; `caption evaluate` prints its table and writes its `metrics()`,
validation and `caption test` log its `logged()` values, `caption compare` puts several side by side.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from caption.decoding import Caption
from caption.metrics import METRICS, PTB_JAVA, Localisation

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
    references: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)  # image id -> raw references
    file_names: dict[int, str | None] = field(default_factory=dict, repr=False)  # image id -> image file, if any

    def attention_scores(self) -> dict[str, float]:
        """α entropy and, with boxes, the localisation shares, under their logged names."""
        found = {} if self.localisation is None else self.localisation.scores()
        return found | {"alpha_entropy": self.alpha_entropy}

    def logged(self) -> dict[str, float]:
        """Every score under its logged name (bleu4, ..., attention_accuracy, alpha_entropy)."""
        return self.scores | self.attention_scores()

    def metrics(self) -> dict[str, Any]:
        """What metrics.json holds; missing scores are null."""
        return {
            "split": self.split,
            "beam_size": self.beam_size,
            "images": len(self.captions),
            "tokenizer": self.tokenizer,
            "object_words": 0 if self.localisation is None else self.localisation.nouns,
            "metrics": {name: None if math.isnan(value) else value for name, value in self.logged().items()},
            "attention_by_label": {} if self.localisation is None else {
                label: asdict(found) for label, found in self.localisation.by_label.items()},
        }

    def table(self) -> str:
        """The scores as a two-column text table, in %."""
        rows = [(METRIC_NAMES[name], format_score(self.scores[name])) for name in METRICS if name in self.scores]
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

    def examples(self, count: int = 5) -> str:
        """The first `count` images' captions (by id), each with its first two references."""
        return "\n".join(f"  [{image_id}] {self.captions[image_id].text!r}\n      refs: "
                         f"{list(self.references.get(image_id, ()))[:2]}" for image_id in sorted(self.captions)[:count])


def format_score(value: float | None) -> str:
    """A score in % with one decimal, or "missing"."""
    return "missing" if value is None or math.isnan(value) else f"{100 * value:.1f}"
