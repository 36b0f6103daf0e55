"""What the corpus scores of a split are made of, image by image: the sufficient statistics from which BLEU-4,
CIDEr-D and attention accuracy are recomputed exactly on any subset or resample of the images (`caption compare`'s
paired test, `caption.reports.intervals`).

Filled as the scores are computed (`caption.evaluation.metrics.score_captions`, `caption.evaluation.scoring`), from
the same PTB-tokenised captions and references, at no extra cost: BLEU is pycocoevalcap's BleuScorer, whose
per-image counts are kept; CIDEr-D's per-image scores are what pycocoevalcap's Cider returns beside their mean.

- BLEU (pycocoevalcap's BleuScorer, option "closest"), per image i and n = 1..4: correct[i, n], the hypothesis's
  n-grams clipped by their most frequent count in one reference; guess[i, n] = max(0, hypothesis length − n + 1);
  hypothesis_length[i]; reference_length[i], the reference length closest to the hypothesis's (of two equally
  close, the shorter). The corpus BLEU-n of a set S of images (`corpus_bleu`), with tiny = 1e-15, small = 1e-9:
      p_m    = (Σ_S correct[:, m] + tiny) / (Σ_S guess[:, m] + small)
      BLEU-n = (Π_{m≤n} p_m)^(1/n) · BP,   BP = exp(1 − 1/r) if r < 1 else 1,
      r      = (Σ_S hypothesis_length + tiny) / (Σ_S reference_length + small)
  which on the whole split is pycocoevalcap's corpus BLEU.
- CIDEr-D: each image's score, its document frequencies (and log N) from the references of the whole split; the
  corpus score of S is their mean over S (pycocoevalcap's corpus CIDEr-D on the whole split). On a subset the
  document frequencies stay those of the whole split.
- Attention accuracy (`caption.evaluation.grounding.localisation`): per image, its object words whose attention peak
  lies inside a box of the label they name (attention_hits) and its object words (object_words, absent objects
  included); the corpus accuracy of S is Σ_S attention_hits / Σ_S object_words. An image without boxes has 0 of
  each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BLEU_N = 4  # BLEU-1..4, as pycocoevalcap's Bleu(4)
TINY, SMALL = 1e-15, 1e-9  # pycocoevalcap's BleuScorer: a precision of 0 matches stays > 0; no division by 0


@dataclass(frozen=True)
class BleuCounts:
    """pycocoevalcap's BLEU counts of each image, (N, ...) in the order of `ImageScores.image_ids`."""

    correct: np.ndarray  # (N, 4) clipped n-gram matches, n = 1..4
    guess: np.ndarray  # (N, 4) the hypothesis's n-grams
    hypothesis_length: np.ndarray  # (N,) words
    reference_length: np.ndarray  # (N,) the closest reference's words

    def stacked(self) -> np.ndarray:
        """The counts side by side, (N, 10): correct 1..4, guess 1..4, hypothesis length, reference length."""
        return np.concatenate([self.correct, self.guess, self.hypothesis_length[:, None],
                               self.reference_length[:, None]], axis=1).astype(np.float64)


def bleu_counts(cooked: Sequence[Mapping[str, Any]]) -> BleuCounts:
    """The counts of a BleuScorer's `ctest` (one dict per image: "correct", "guess", "testlen" and "reflen", every
    reference's length), the reference length chosen as its compute_score(option="closest") chooses it."""
    closest = [min((abs(length - image["testlen"]), length) for length in image["reflen"])[1] for image in cooked]
    return BleuCounts(
        correct=np.array([image["correct"] for image in cooked], dtype=np.int64).reshape(len(cooked), BLEU_N),
        guess=np.array([image["guess"] for image in cooked], dtype=np.int64).reshape(len(cooked), BLEU_N),
        hypothesis_length=np.array([image["testlen"] for image in cooked], dtype=np.int64),
        reference_length=np.array(closest, dtype=np.int64),
    )


def corpus_bleu(summed: np.ndarray) -> np.ndarray:
    """BLEU-1..4 from counts summed over a set of images (`BleuCounts.stacked` summed over the images, any leading
    shape: (..., 10) -> (..., 4)), as pycocoevalcap's BleuScorer computes its corpus score."""
    correct, guess = summed[..., :BLEU_N], summed[..., BLEU_N:2 * BLEU_N]  # (..., 4) each
    hypothesis, reference = summed[..., 2 * BLEU_N], summed[..., 2 * BLEU_N + 1]  # (...)
    precisions = (correct + TINY) / (guess + SMALL)  # (..., 4)
    bleu = np.cumprod(precisions, axis=-1) ** (1.0 / np.arange(1, BLEU_N + 1))  # (..., 4)
    ratio = (hypothesis + TINY) / (reference + SMALL)  # (...)
    brevity = np.where(ratio < 1, np.exp(1 - 1 / ratio), 1.0)  # (...)
    return bleu * brevity[..., None]


@dataclass
class ImageScores:
    """Per image, what the corpus scores are made of; each array in the order of `image_ids`, None where the metric
    was not computed (BLEU, CIDEr-D not asked for; attention accuracy without boxes)."""

    image_ids: tuple[int, ...] = ()
    bleu: BleuCounts | None = None
    cider: np.ndarray | None = None  # (N,) CIDEr-D, document frequencies from the whole split
    attention_hits: np.ndarray | None = None  # (N,) object words whose peak is on the named object
    object_words: np.ndarray | None = None  # (N,) object words

    def add_attention(self, found: Mapping[int, tuple[int, int]]) -> None:
        """Attention accuracy's counts: image id -> (hits, object words); an image not in `found` has 0 of each."""
        self.attention_hits = np.array([found.get(image_id, (0, 0))[0] for image_id in self.image_ids],
                                       dtype=np.int64)
        self.object_words = np.array([found.get(image_id, (0, 0))[1] for image_id in self.image_ids],
                                     dtype=np.int64)
