"""`Evaluation`: the one report of a model on a split, as every command shows it (a table, metrics.json, logs).

Made by `caption.evaluation.scoring.score_split`; `caption evaluate` prints its table and writes its `metrics()`,
validation and `caption test` log its `logged()` values, `caption compare` puts several side by side. `not_looking`
says when its attention does not look (validation warns with it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from caption.evaluation.degeneration import habit_warnings, habits
from caption.evaluation.grounding import Localisation
from caption.evaluation.hallucination import Hallucination
from caption.evaluation.image_scores import ImageScores
from caption.evaluation.metrics import TEST_METRICS
from caption.evaluation.ptb_tokenizer import PTB_JAVA
from caption.model.captions import Caption
from caption.model.vocabulary import tokenize

METRIC_NAMES = {
    "bleu1": "BLEU-1", "bleu2": "BLEU-2", "bleu3": "BLEU-3", "bleu4": "BLEU-4", "spice": "SPICE",
    "meteor": "METEOR", "rouge_l": "ROUGE-L", "cider": "CIDEr", "attention_accuracy": "attention accuracy",
    "attention_other_object": "peak on another object", "attention_background": "peak on the background",
    "attention_absent": "noun of an absent object", "attention_chance_location": "random location",
    "attention_chance_object": "random object", "attention_correctness": "attention correctness",
    "attention_chance_correctness": "uniform α's correctness", "chair_i": "CHAIR-i", "chair_s": "CHAIR-s",
    "alpha_entropy": "α entropy per step (nats)",
    "distinct_captions": "distinct captions / images", "dangling_ending": "captions ending in a function word",
    "repeated_trigram": "captions repeating a trigram",
}

GREEDY = "greedy/"  # where greedy decoding's scores beside a beam's are logged: test/greedy/bleu4 ...
GREEDY_METRICS = ("bleu4", "cider")  # greedy decoding's coco-caption scores beside a beam's: validation's
SIDE_BY_SIDE = ("bleu4", "cider", "attention_accuracy")  # the beam's and greedy's, shown side by side


@dataclass
class Evaluation:
    """Scores of one model on one split, with its captions."""

    split: str
    beam_size: int
    scores: dict[str, float]  # METRICS names -> score, NaN when missing (METEOR without Java)
    captions: dict[int, Caption] = field(repr=False)  # image id -> caption, in the loader's order
    localisation: Localisation | None = None  # None when the data has no object boxes
    alpha_entropy: float = float("nan")  # mean H(α_t) over generated steps
    # caption.evaluation.ptb_tokenizer.PTB_JAVA (official) or PTB_PYTHON (the stand-in, without Java)
    tokenizer: str = PTB_JAVA
    references: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)  # image id -> raw references
    locations: int = 0  # L, the attention locations (log L: the entropy of uniform α); 0 when unknown
    file_names: dict[int, str | None] = field(default_factory=dict, repr=False)  # image id -> image file, if any
    greedy: Evaluation | None = field(default=None, repr=False)  # the same split decoded greedily, beside a beam
    # the same split decoded at each beam size of `--beam_sizes` (BLEU-4, CIDEr-D, attention accuracy), by beam size
    beam_sizes: dict[int, Evaluation] = field(default_factory=dict, repr=False)
    # what BLEU, CIDEr-D and attention accuracy are made of, image by image (caption compare's paired test)
    per_image: ImageScores | None = field(default=None, repr=False)
    absent: dict[str, str] = field(default_factory=dict)  # metric -> why it was not computed (SPICE without its jars)
    hallucination: Hallucination | None = None  # CHAIR; None when the data has no object boxes

    def attention_scores(self) -> dict[str, float]:
        """α entropy and, with boxes, the localisation shares and CHAIR, under their logged names."""
        found = {} if self.localisation is None else self.localisation.scores()
        named = {} if self.hallucination is None else self.hallucination.scores()
        return found | named | {"alpha_entropy": self.alpha_entropy}

    def distinct(self) -> int:
        """How many different captions the split's images got."""
        return len({caption.text for caption in self.captions.values()})

    def habits(self) -> dict[str, float]:
        """What self-critical training may do to captions, as shares (`caption.evaluation.degeneration`)."""
        return habits([caption.words for caption in self.captions.values()])

    def reference_habits(self) -> dict[str, float]:
        """The same shares of the references, the first of each image (tokenised as the vocabulary is)."""
        return habits([tokenize(references[0]) for references in self.references.values() if references])

    def habit_warnings(self) -> list[str]:
        """One line per habit the captions have clearly more of than the references."""
        return habit_warnings(self.habits(), self.reference_habits(), split=self.split) if self.references else []

    def logged(self) -> dict[str, float]:
        """Every score under its logged name (bleu4, ..., attention_accuracy, alpha_entropy, distinct_captions ...)."""
        return self.scores | self.attention_scores() | self.habits()

    def metrics(self) -> dict[str, Any]:
        """What metrics.json holds; missing scores are null."""
        return {
            "split": self.split,
            "beam_size": self.beam_size,
            "images": len(self.captions),
            "tokenizer": self.tokenizer,
            "object_words": 0 if self.localisation is None else self.localisation.nouns,
            "metrics": {name: None if math.isnan(value) else value for name, value in self.logged().items()},
            "absent_metrics": dict(self.absent),
            "distinct_captions": self.distinct(),
            "reference_habits": {name: None if math.isnan(value) else value
                                 for name, value in self.reference_habits().items()}
            if self.references else {},
            "attention_by_label": {} if self.localisation is None else {
                label: {name: none_if_nan(value) for name, value in asdict(found).items()}
                for label, found in self.localisation.by_label.items()},
            "hallucination_by_label": {} if self.hallucination is None else {
                label: asdict(found) for label, found in self.hallucination.by_label.items()},
        } | ({} if self.greedy is None else {"greedy": {
            name: None if math.isnan(value) else value for name, value in self.greedy.logged().items()}})

    def side_by_side(self) -> str | None:
        """One line: the beam's BLEU-4, CIDEr and attention accuracy beside greedy decoding's on the same images
        (validation decodes greedily); None without a greedy decoding."""
        if self.greedy is None:
            return None
        ours, greedy = self.logged(), self.greedy.logged()
        cells = [f"{METRIC_NAMES[name]} {format_score(ours[name])} / {format_score(greedy[name])}"
                 for name in SIDE_BY_SIDE if name in ours and name in greedy]
        return f"beam {self.beam_size} / greedy: " + ", ".join(cells)

    def table(self) -> str:
        """The scores as a two-column text table, in %."""
        rows = [(METRIC_NAMES[name], format_score(self.scores[name])) for name in TEST_METRICS if name in self.scores]
        if self.localisation is not None and not self.localisation.nouns:
            rows.append((METRIC_NAMES["attention_accuracy"], unnamed_labels(self.localisation.box_labels)))
        elif self.localisation is not None:
            present = sum(found.nouns_present for found in self.localisation.by_label.values())
            counted = {"attention_accuracy": f" ({self.localisation.nouns} object words)",
                       "attention_correctness": f" ({present} object words of objects in their image)"}
            for name, value in self.localisation.scores().items():
                rows.append((METRIC_NAMES[name], format_score(value) + counted.get(name, "")))
            if self.localisation.by_label:
                rows.append(("attention per label", ""))
            for label, found in self.localisation.by_label.items():
                chance = format_score(found.chance_location)
                correctness = (f"; correctness {format_score(found.correctness)}, uniform α "
                               f"{format_score(found.chance_correctness)}" if found.nouns_present else "")
                rows.append((f"  {label}", f"{format_score(found.accuracy)} ({found.nouns} words; random location "
                                           f"{chance}{correctness})"))
        if self.hallucination is not None:
            named = self.hallucination
            rows.append((METRIC_NAMES["chair_i"], format_score(named.scores()["chair_i"])
                         + f" ({named.hallucinated_mentions} of {named.mentions} object mentions)"))
            rows.append((METRIC_NAMES["chair_s"], format_score(named.scores()["chair_s"])
                         + f" ({named.hallucinated_captions} of {named.captions} captions)"))
        rows.append((METRIC_NAMES["alpha_entropy"], f"{self.alpha_entropy:.2f}"))
        rows.append((METRIC_NAMES["distinct_captions"], f"{self.distinct()} / {len(self.captions)}"))
        rows += [(METRIC_NAMES[name], format_score(value)) for name, value in self.habits().items()
                 if name != "distinct_captions" and not math.isnan(value)]
        official = "" if self.tokenizer == PTB_JAVA else " (no Java: close to, not exactly, the official scores)"
        header = (f"{self.split} split, {len(self.captions)} images, beam {self.beam_size}, "
                  f"tokenizer {self.tokenizer}{official} (%)")
        width = max(len(name) for name, _ in rows)
        side_by_side = [] if self.greedy is None else [f"  {self.side_by_side()}"]
        return "\n".join([header, *(f"  {name:<{width}}  {value}" for name, value in rows), *side_by_side])

    def examples(self, count: int = 5) -> str:
        """The first `count` images' captions (by id), each with its first two references."""
        return "\n".join(f"  [{image_id}] {self.captions[image_id].text!r}\n      refs: "
                         f"{list(self.references.get(image_id, ()))[:2]}" for image_id in sorted(self.captions)[:count])


def unnamed_labels(box_labels: tuple[str, ...], shown: int = 8) -> str:
    """The one line for data with boxes whose captions name none of their labels."""
    labels = ", ".join(box_labels[:shown]) + (" ..." if len(box_labels) > shown else "")
    return (f"not scored: no generated word names a label of the boxes ({labels}); caption words name them by the "
            f"label's name, singular or plural, or as data.source.init_args.labels maps them")


def none_if_nan(value: Any) -> Any:
    """`value`, or None for a NaN (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def format_score(value: float | None) -> str:
    """A score in % with one decimal, or "missing"."""
    return "missing" if value is None or math.isnan(value) else f"{100 * value:.1f}"


UNIFORM_SHARE = 0.95  # α entropy at or above this share of log L: attention is (nearly) uniform
OBJECT_MARGIN = 0.10  # attention accuracy less than this above a random object's: no better than one
ABSENT_SHARE = 0.25  # object words naming what the image does not hold, at least this share: objects not told apart
RESPONSIBLE = {  # attention kind -> the settings most likely responsible when it does not look
    "hard": "model.hard.entropy_weight (its bonus flattens α: lower it), model.hard.reinforce_weight (too weak a "
            "REINFORCE term leaves α unlearned) and the stage-1 soft run whose encoder it uses "
            "(model.encoder.weights: that run must look first)",
    "soft": "model.optimization.learning_rate (too large a step lets attention settle before the encoder tells the "
            "objects apart: lower it), model.soft.alpha_c (the doubly stochastic penalty spreads α over the image: "
            "lower it) and the encoder (model.encoder.channels, kernel_sizes, coordinates: a grid whose cells see "
            "about one object)",
}
EXPLAINED = "docs/hard-attention.md"
PRETRAIN = ("an encoder pretrained on the data's labelled objects, then frozen (the paper's setting): `caption "
            "pretrain-encoder --config YOUR_CONFIG --trainer.default_root_dir runs/NAME_encoder`, then train with "
            "--model.encoder.weights runs/NAME_encoder (docs/datasets.md#an-encoder-pretrained-on-your-labels)")


def not_looking(evaluation: Evaluation, *, kind: str) -> str | None:
    """One line saying why `kind` attention does not look, naming the settings most likely responsible, or None
    when it looks: α within a few percent of uniform entropy (`UNIFORM_SHARE`), or, on data with boxes, attention
    accuracy no better than a random object of the image (`OBJECT_MARGIN`)."""
    found = []
    if evaluation.locations > 1 and evaluation.alpha_entropy >= UNIFORM_SHARE * math.log(evaluation.locations):
        found.append(f"α entropy {evaluation.alpha_entropy:.2f} nats is within {1 - UNIFORM_SHARE:.0%} of uniform "
                     f"attention's {math.log(evaluation.locations):.2f} (log L, L = {evaluation.locations})")
    located = evaluation.localisation
    if located is not None and located.nouns and located.accuracy < located.chance_object + OBJECT_MARGIN:
        found.append(f"attention accuracy {located.accuracy:.3f} is no better than a random object of the image "
                     f"({located.chance_object:.3f}, {located.nouns} object words)")
    if not found:
        return None
    responsible = f"Most likely responsible: {RESPONSIBLE.get(kind, RESPONSIBLE['soft'])}"
    if located is not None and located.nouns and located.absent >= ABSENT_SHARE:
        responsible = (f"{located.absent:.0%} of the object words name what the image does not hold: the encoder does "
                       f"not tell the objects apart yet, and attention has nothing to find them by. The remedy: "
                       f"{PRETRAIN}. Also possibly responsible: {RESPONSIBLE.get(kind, RESPONSIBLE['soft'])}")
    return (f"{kind} attention is not looking on the {evaluation.split} split: {'; '.join(found)}. {responsible}. "
            f"See {EXPLAINED}, \"When attention is not looking\".")
