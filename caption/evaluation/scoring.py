"""The one evaluation path: captions of a split -> gathered across ranks -> coco-caption scores -> one report.

Validation and `caption test` (inside Lightning, `EpochCaptions`), `caption evaluate` and `caption compare`
(`caption.inference.evaluate`) all turn each decoded batch into `Captioned` items (`captioned_batch`), gather them
by image id (`gather_by_image`, which `caption predict`'s writer uses too) and score them with `score_split`: raw
candidates and raw references through coco-caption's PTB tokenizer, pycocoevalcap's scorers (SPICE only where its
jars are installed: `caption.evaluation.metrics`), the mean entropy of α per step and, where the data has object
boxes, where each object noun looked (`caption.evaluation.grounding.localisation`: attention accuracy and
correctness) and whether it names what the image holds (CHAIR: `caption.evaluation.hallucination`); what BLEU,
CIDEr-D and attention accuracy are made of, image by image, is kept beside them (`caption.evaluation.image_scores`:
`caption compare`'s paired test resamples it). The references' tokens are kept in a `PTBCache`, so each epoch's
validation runs the tokenizer (Java) on the new candidates only. The result is an `Evaluation`; its table and
metrics.json are in `caption.evaluation.report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import lightning as L
import torch
from torch import Tensor

from caption.data.sources.records import ObjectBox
from caption.evaluation.grounding import CaptionAttention, localisation, mean_entropy, step_entropy
from caption.evaluation.hallucination import ground_truth_labels, hallucination
from caption.evaluation.image_scores import ImageScores
from caption.evaluation.metrics import METEOR_TIMEOUT, TEST_METRICS, coco_scores
from caption.evaluation.ptb_tokenizer import PTBCache
from caption.evaluation.report import Evaluation
from caption.model.captions import Caption

Key = TypeVar("Key")
Item = TypeVar("Item")


@dataclass(frozen=True)
class Captioned:
    """One image's generated caption, with what scoring it needs."""

    image_id: int
    caption: Caption
    references: tuple[str, ...]  # raw, as the dataset gives them (the PTB tokenizer sees them so)
    objects: tuple[ObjectBox, ...]  # the image's object boxes in the encoder input's frame; empty without boxes
    entropy: Tensor  # H(α_t) of each generated step (T,)
    locations: int  # L, the attention locations of α (kept when α itself is dropped)


def captioned_batch(batch: dict[str, Any], captions: list[Caption], *, keep_attention: bool) -> list[Captioned]:
    """The batch's images (their "image_id", raw "references" and "objects" boxes) with their captions. Without
    `keep_attention`, α is dropped where the image has no boxes (it is only scored there): less to gather."""
    boxes = batch.get("objects") or [[]] * len(captions)  # per image: ObjectBox.to_dict()s
    items = []
    for image_id, caption, references, image_boxes in zip(batch["image_id"].tolist(), captions, batch["references"],
                                                          boxes):
        objects = tuple(ObjectBox.from_dict(box) for box in image_boxes)
        entropy, locations = step_entropy(caption.alpha), caption.alpha.shape[-1]
        if not keep_attention and not objects:
            caption = replace(caption, alpha=caption.alpha[:, :0])  # (T, 0)
        items.append(Captioned(image_id, caption, tuple(references), objects, entropy, locations))
    return items


def gather_by_image(items: dict[Key, Item], *, world_size: int) -> dict[Key, Item]:
    """Every rank's items, one per key (distributed samplers pad a split with repeats of a few images)."""
    if world_size > 1:
        everything: list[Any] = [None] * world_size
        torch.distributed.all_gather_object(everything, items)
        items = {key: item for part in everything for key, item in part.items()}
    return items


def score_split(
    captioned: Iterable[Captioned], *, split: str, beam_size: int, image_size: tuple[int, int] | None,
    word_labels: Mapping[str, str], metrics: tuple[str, ...] = TEST_METRICS, meteor_timeout: float = METEOR_TIMEOUT,
    cache: PTBCache | None = None,
) -> Evaluation:
    """Score the captions of a split: coco-caption `metrics` (PTB-tokenised candidates and references), the mean
    α entropy per step and, on the images with object boxes when `image_size` (H, W: the boxes' frame) is known,
    the localisation report of the words `word_labels` maps to a box's label (the data source's), and CHAIR on those
    images (their boxes' and references' labels the ground truth). A requested metric
    that cannot run here (SPICE without its jars) is left out, with why (`Evaluation.absent`)."""
    captioned = {item.image_id: item for item in captioned}
    per_image, absent = ImageScores(), {}
    scores, tokenizer = coco_scores(
        {image_id: item.caption.text for image_id, item in captioned.items()},
        {image_id: list(item.references) for image_id, item in captioned.items()},
        metrics=metrics, meteor_timeout=meteor_timeout, cache=cache, per_image=per_image, absent=absent,
    )
    boxed = {image_id: CaptionAttention(item.caption.words, item.caption.alpha, item.objects, item.caption.locations)
             for image_id, item in captioned.items() if item.objects}
    found = None
    if boxed and image_size is not None:
        found = localisation(boxed.values(), image_size=tuple(image_size), word_labels=word_labels)
        per_image.add_attention(dict(zip(boxed, zip(found.image_hits, found.image_words))))
    named = None
    if boxed:
        named = hallucination(((item.caption.words, ground_truth_labels(item.objects, item.references,
                                                                        word_labels=word_labels))
                               for item in captioned.values() if item.objects), word_labels=word_labels)
    entropy = mean_entropy(item.entropy for item in captioned.values())
    return Evaluation(split, beam_size, scores, {image_id: item.caption for image_id, item in captioned.items()},
                      found, entropy, tokenizer,
                      references={image_id: item.references for image_id, item in captioned.items()},
                      locations=max((item.locations for item in captioned.values()), default=0),
                      per_image=per_image, absent=absent, hallucination=named)


class EpochCaptions:
    """What a LightningModule's validation or test epoch collects on this rank, then scores on every rank.

    The references' PTB tokens stay in `cache` from one epoch to the next."""

    def __init__(self) -> None:
        self.captioned: dict[int, Captioned] = {}
        self.cache = PTBCache()

    def add(self, batch: dict[str, Any], captions: list[Caption]) -> None:
        self.captioned.update((item.image_id, item) for item in captioned_batch(batch, captions, keep_attention=False))

    def score(self, trainer: L.Trainer, *, split: str, beam_size: int, metrics: tuple[str, ...],
              image_size: tuple[int, int] | None, word_labels: Mapping[str, str]) -> Evaluation:
        """The epoch's report, the same on every rank: gathered, then scored once, on rank 0 (the tokenizer,
        METEOR and SPICE run Java), and broadcast, so checkpointing and early stopping decide the same everywhere."""
        captioned = gather_by_image(self.captioned, world_size=trainer.world_size)
        self.captioned = {}
        evaluation = None
        if trainer.is_global_zero:
            evaluation = score_split(captioned.values(), split=split, beam_size=beam_size, image_size=image_size,
                                     word_labels=word_labels, metrics=metrics, cache=self.cache)
        return trainer.strategy.broadcast(evaluation)
