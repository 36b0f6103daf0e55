"""CHAIR (Rohrbach et al., EMNLP 2018, "Object Hallucination in Image Captioning"): how often the captions name an
object the image does not hold.

A *mention* is a generated word (or two-word phrase) that names a label of the data's boxes through the source's
word -> label map (`caption.data.sources.category_words.named_labels`: "men" -> person, "hot dog" -> hot dog); it is
*hallucinated* when the label is none of the image's ground-truth objects: the labels of its boxes (COCO's instances,
the built-in data's shapes) and the labels its reference captions name, as the published code
(LisaAnne/Hallucination, `utils/chair.py`) takes both the segmentations and the captions. As there, every mention
counts, a label named twice in a caption twice:

    CHAIR-i = |hallucinated mentions| / |mentions|
    CHAIR-s = |captions with a hallucinated mention| / |captions|

Only images with boxes are scored (data without boxes has no ground truth). With the boxes alone as ground truth,
CHAIR-i is `attention_absent` (`caption.evaluation.grounding.localisation`); the references add what the annotators
saw but did not box.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from caption.data.sources.category_words import named_labels
from caption.data.sources.records import ObjectBox
from caption.model.vocabulary import tokenize


@dataclass(frozen=True)
class LabelHallucination:
    """CHAIR's counts of one label."""

    mentions: int  # generated words naming the label
    hallucinated: int  # of them, in captions of images without the label
    chair_i: float  # hallucinated / mentions


@dataclass(frozen=True)
class Hallucination:
    """CHAIR over the captions of the images with boxes."""

    captions: int
    mentions: int  # generated words naming a label of the data's boxes
    hallucinated_mentions: int  # of them, naming a label that is not among the image's ground-truth objects
    hallucinated_captions: int  # captions with at least one hallucinated mention
    by_label: dict[str, LabelHallucination] = field(default_factory=dict)  # label -> its counts, sorted by label

    def scores(self) -> dict[str, float]:
        """CHAIR-i and CHAIR-s under their logged names (chair_i, chair_s); NaN without mentions or captions."""
        return {"chair_i": self.hallucinated_mentions / self.mentions if self.mentions else float("nan"),
                "chair_s": self.hallucinated_captions / self.captions if self.captions else float("nan")}


def ground_truth_labels(objects: Sequence[ObjectBox], references: Sequence[str], *,
                        word_labels: Mapping[str, str]) -> set[str]:
    """The labels an image holds for CHAIR: those of its boxes and those its raw reference captions name (tokenised
    as the vocabulary tokenises)."""
    named = {label for reference in references for label in named_labels(tokenize(reference), word_labels)}
    return {box.label for box in objects} | (named - {None})


def hallucination(captions: Iterable[tuple[Sequence[str], set[str]]], *,
                  word_labels: Mapping[str, str]) -> Hallucination:
    """CHAIR of `captions`, per image its generated words and its ground-truth labels (`ground_truth_labels`);
    `word_labels`: caption word (or two-word phrase) -> label, the data source's."""
    scored = mentions = hallucinated_mentions = hallucinated_captions = 0
    per_label: dict[str, list[int]] = {}  # label -> [mentions, hallucinated]
    for words, truth in captions:
        scored += 1
        named = [label for label in named_labels(words, word_labels) if label is not None]
        hallucinated = [label for label in named if label not in truth]
        mentions += len(named)
        hallucinated_mentions += len(hallucinated)
        hallucinated_captions += bool(hallucinated)
        for label in named:
            counts = per_label.setdefault(label, [0, 0])
            counts[0] += 1
            counts[1] += label not in truth
    by_label = {label: LabelHallucination(count, wrong, wrong / count)
                for label, (count, wrong) in sorted(per_label.items())}
    return Hallucination(scored, mentions, hallucinated_mentions, hallucinated_captions, by_label)
