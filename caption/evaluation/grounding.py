"""Scores of where the model looked: the attention peak and the attention mass of each object noun against the image's
boxes, and α's entropy.

`localisation` scores where the model looked, on data with object boxes (the built-in data's shapes, COCO's
instances): for every generated word that names a label of the data's boxes (the source's word -> label map:
"dogs" -> dog, "man" -> person, "circle" -> circle), whether its attention peak falls inside a box of the named
label (the *attention accuracy*), inside another object's box, on the background, or whether the image holds no
such object at all (a miss), beside two chance levels: a uniformly random location, and a peak on a uniformly
chosen object of the image (0.5 on two-object scenes: what a model that looks at *an* object, not the named one,
scores); and the accuracy per label. Beside it, the *attention correctness* of Liu et al. (AAAI 2017, "Attention
Correctness in Neural Image Captioning"): the α mass inside the boxes of the named label, each cell's α spread evenly
over the cell (`caption.data.box_targets.cell_coverage`), averaged over the words whose label the image holds, with
its chance level, the boxes' share of the image (the mass uniform α puts there). `mean_entropy` of α says how sharp
it is, on any data. Whether the words name what the image holds at all is CHAIR (`caption.evaluation.hallucination`).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import NamedTuple

import torch

from caption.data.sources.category_words import named_labels
from caption.data.sources.records import ObjectBox
from caption.data.box_targets import cell_coverage
from caption.evaluation.grid import attention_grid, cell_centres, inside



class CaptionAttention(NamedTuple):
    """One image's generated words, their attention and the image's boxes (a plain 3-tuple without `locations`)."""

    words: Sequence[str]
    alpha: torch.Tensor  # α of each word (T, L)
    boxes: Sequence[ObjectBox]
    # hard attention: the location each word's context used (T,), its peak (the sampled one with
    # `hard_eval_context: sample`); None: the peak of α
    locations: torch.Tensor | None = None


Captions = Iterable[CaptionAttention | tuple[Sequence[str], torch.Tensor, Sequence[ObjectBox]]]  # per image


@dataclass(frozen=True)
class LabelAccuracy:
    """The attention accuracy and correctness of the generated words naming one label."""

    nouns: int  # generated words naming the label, in the image or not
    accuracy: float  # the share whose peak lies inside a box of the label
    chance_location: float  # the accuracy of a uniformly random location on the same words
    nouns_present: int  # of them, the words of images holding the label: what correctness averages over
    correctness: float  # their mean α mass inside the label's boxes; NaN without such words
    chance_correctness: float  # the same of uniform α: the boxes' mean share of the image


@dataclass(frozen=True)
class Localisation:
    """Where the attention peak of each generated object noun lies, as shares of those nouns (the first four sum to 1),
    and how much of its α lies on the named object."""

    nouns: int  # generated words naming a label of the data, in the image or not
    accuracy: float  # the peak lies inside a box of the named label
    other_object: float  # inside another object's box
    background: float  # inside no object's box
    absent: float  # the image holds no object of that label: a miss
    chance_location: float  # the accuracy of a uniformly random location on the same nouns
    chance_object: float  # the accuracy of a peak on a uniformly chosen object of the image
    # the mean α mass inside the named label's boxes, over the nouns of images holding the label (attention
    # correctness), and that of uniform α (the boxes' share of the image); NaN without such nouns
    correctness: float = float("nan")
    chance_correctness: float = float("nan")
    by_label: dict[str, LabelAccuracy] = field(default_factory=dict)  # label -> its words' accuracy
    box_labels: tuple[str, ...] = ()  # the labels of the images' boxes, sorted: what the words could have named
    # per image, in the order given: its words whose peak is on the named object, and its object words (the
    # sufficient statistics of the accuracy: caption.evaluation.image_scores)
    image_hits: tuple[int, ...] = field(default=(), repr=False)
    image_words: tuple[int, ...] = field(default=(), repr=False)

    def scores(self) -> dict[str, float]:
        """The shares under their logged names (attention_accuracy, attention_other_object, ...,
        attention_correctness, attention_chance_correctness)."""
        return {f"attention_{item.name}": float(getattr(self, item.name)) for item in fields(self)
                if item.name not in ("nouns", "by_label", "box_labels", "image_hits", "image_words")}


@dataclass
class LabelTally:
    """The sums behind one label's `LabelAccuracy`, while its words are counted."""

    nouns: int = 0
    hits: int = 0
    chance_location: float = 0.0
    nouns_present: int = 0
    correctness: float = 0.0
    chance_correctness: float = 0.0

    def accuracy(self) -> LabelAccuracy:
        return LabelAccuracy(self.nouns, self.hits / self.nouns, self.chance_location / self.nouns,
                             self.nouns_present, mean(self.correctness, self.nouns_present),
                             mean(self.chance_correctness, self.nouns_present))


def localisation(captions: Captions, *, image_size: tuple[int, int], word_labels: Mapping[str, str]) -> Localisation:
    """Where each generated word naming a label of the images' boxes looked.

    `captions` holds, per image, the generated words, their attention α (T, L) and the image's boxes in the frame
    of the encoder input, whose (H, W) is `image_size` (`CaptionSource.input_boxes`), and under hard attention the
    location each word used, which is its peak (its α mass is still α's); `word_labels` maps caption
    words (and two-word phrases, `named_labels`) to the labels the data has boxes for (`CaptionSource.word_labels`):
    a word of the map whose label the image has no box of is a miss (absent). The shares are NaN when no generated
    word names a label; attention correctness and its chance level when no such word's label is in its image.
    """
    counts = {"accuracy": 0, "other_object": 0, "background": 0, "absent": 0}
    chance_location = chance_object = 0.0
    per_label: dict[str, LabelTally] = {}
    box_labels: set[str] = set()
    image_hits, image_words = [], []
    for item in captions:
        words, alpha, boxes, locations = CaptionAttention(*item)
        box_labels.update(box.label for box in boxes)
        image_hits.append(0)
        image_words.append(0)
        centres = cell_centres(alpha.shape[-1], image_size)
        # label -> the share of the cell centres inside its boxes, and of each cell's area (L,): once per image
        regions: dict[str, tuple[float, torch.Tensor]] = {}
        for step, (label, weights) in enumerate(zip(named_labels(words, word_labels), alpha)):
            if label is None:
                continue
            tally = per_label.setdefault(label, LabelTally())
            tally.nouns += 1
            image_words[-1] += 1
            named = [box.box for box in boxes if box.label == label]
            if not named:
                counts["absent"] += 1
                continue
            peak = centres[int(weights.argmax() if locations is None else locations[step])]
            hit = any(inside(box, peak) for box in named)
            if hit:
                counts["accuracy"] += 1
                image_hits[-1] += 1
            elif any(inside(other.box, peak) for other in boxes if other.label != label):
                counts["other_object"] += 1
            else:
                counts["background"] += 1
            if label not in regions:
                regions[label] = (sum(any(inside(box, centre) for box in named) for centre in centres) / len(centres),
                                  cell_coverage(named, grid=attention_grid(alpha.shape[-1], image_size),
                                                image_size=image_size))
            location, coverage = regions[label]
            chance_location += location
            chance_object += len(named) / len(boxes)
            tally.hits += hit
            tally.chance_location += location
            tally.nouns_present += 1
            tally.correctness += float((weights.double() * coverage).sum())
            tally.chance_correctness += float(coverage.mean())  # cells of equal area: the boxes' share
    nouns = sum(counts.values())
    share = (lambda count: count / nouns) if nouns else (lambda count: float("nan"))
    present = sum(tally.nouns_present for tally in per_label.values())
    by_label = {label: tally.accuracy() for label, tally in sorted(per_label.items())}
    return Localisation(nouns=nouns, **{name: share(count) for name, count in counts.items()},
                        chance_location=share(chance_location), chance_object=share(chance_object),
                        correctness=mean(sum(tally.correctness for tally in per_label.values()), present),
                        chance_correctness=mean(sum(tally.chance_correctness for tally in per_label.values()), present),
                        by_label=by_label, box_labels=tuple(sorted(box_labels)), image_hits=tuple(image_hits),
                        image_words=tuple(image_words))


def mean(total: float, count: float) -> float:
    """total / count, NaN when count is 0."""
    return total / count if count else float("nan")


def step_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """H(α_t) = -Σ_i α_ti log α_ti of each step, in nats (log L for uniform attention): α (T, L) -> (T,)."""
    return -(alpha * alpha.clamp(min=1e-12).log()).sum(-1)


def mean_entropy(entropies: Iterable[torch.Tensor]) -> float:
    """The mean over every generated step of per-caption `step_entropy`s; NaN without any step. Summed in float64, so
    the order the ranks gathered the captions in does not change the figure."""
    steps = torch.cat([torch.zeros(0, dtype=torch.float64), *(entropy.double() for entropy in entropies)])
    return float(steps.mean()) if len(steps) else float("nan")
