"""Caption metrics from pycocoevalcap, the coco-caption scorers the paper reports.

Nothing here re-implements a metric: BLEU-1..4, METEOR, ROUGE-L and CIDEr-D are pycocoevalcap's
own scorers called on {image_id: [caption]} dictionaries (BLEU's BleuScorer as its Bleu wrapper
calls it, option "closest", so that its per-image counts can be kept: `caption.evaluation.image_scores`).
Generated captions and references must go through the same tokenisation first: `score_captions`
expects both already tokenised (words joined by spaces); `coco_scores` tokenises raw captions with
coco-caption's PTB tokenizer first (`caption.evaluation.ptb_tokenizer`), for official numbers.

METEOR runs a Java subprocess; if Java is missing, fails or hangs past `meteor_timeout` seconds,
METEOR is reported as missing (NaN) with a warning and every other metric is still produced
(`caption.evaluation.meteor`).
"""

from collections.abc import Iterable

import numpy as np

from pycocoevalcap.bleu.bleu_scorer import BleuScorer
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from caption.evaluation.image_scores import BLEU_N, ImageScores, bleu_counts
from caption.evaluation.meteor import meteor_score
from caption.evaluation.ptb_tokenizer import PTBCache

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
METEOR_TIMEOUT = 120.0  # seconds before METEOR counts as missing (Java hung or too slow)


def score_captions(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = METEOR_TIMEOUT,
    per_image: ImageScores | None = None,
) -> dict[str, float]:
    """Corpus scores of one tokenised candidate per image against its tokenised references.

    Only the requested `metrics` (names from METRICS) are computed; METEOR is the slow one. `per_image`: filled with
    the image ids and what BLEU and CIDEr-D are made of, image by image (when they are computed).
    """
    metrics = set(metrics)
    unknown = metrics - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {METRICS}")
    if set(candidates) != set(references):
        raise ValueError("candidates and references must cover the same image ids")
    if not candidates:
        raise ValueError("no captions to score")
    hypotheses = {key: [caption] for key, caption in candidates.items()}
    if per_image is not None:
        per_image.image_ids = tuple(references)
    scores: dict[str, float] = {}
    if metrics & {"bleu1", "bleu2", "bleu3", "bleu4"}:
        scorer = BleuScorer(n=BLEU_N)  # what Bleu(4).compute_score does, its scorer kept for the per-image counts
        for key, texts in references.items():
            if not texts:
                raise ValueError(f"image {key} has no reference to score its caption against")
            scorer += (hypotheses[key][0], texts)
        bleu, _ = scorer.compute_score(option="closest", verbose=0)
        scores.update({f"bleu{n + 1}": float(value) for n, value in enumerate(bleu)})
        if per_image is not None:
            per_image.bleu = bleu_counts(scorer.ctest)
    if "meteor" in metrics:
        scores["meteor"] = meteor_score(references, hypotheses, timeout=meteor_timeout)
    if "rouge_l" in metrics:
        scores["rouge_l"] = float(Rouge().compute_score(references, hypotheses)[0])
    if "cider" in metrics:
        corpus, each = Cider().compute_score(references, hypotheses)  # each image's, in the order of `references`
        scores["cider"] = float(corpus)
        if per_image is not None:
            per_image.cider = np.asarray(each, dtype=np.float64)
    return {name: scores[name] for name in METRICS if name in metrics}


def coco_scores(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = METEOR_TIMEOUT,
    cache: PTBCache | None = None,
    per_image: ImageScores | None = None,
) -> tuple[dict[str, float], str]:
    """Official coco-caption numbers: raw candidates and raw references through the PTB tokenizer (`cache`: one
    that keeps the tokens of earlier calls), then scored (`per_image`: filled as `score_captions` fills it). Returns
    (scores, the tokenizer used: PTB_JAVA or PTB_PYTHON)."""
    cache = PTBCache() if cache is None else cache
    tokens = cache.tokenize([*candidates.values(), *(text for texts in references.values() for text in texts)])
    hypotheses = {key: tokens[caption] for key, caption in candidates.items()}
    references = {key: [tokens[text] for text in texts] for key, texts in references.items()}
    scores = score_captions(hypotheses, references, metrics=metrics, meteor_timeout=meteor_timeout,
                            per_image=per_image)
    return scores, str(cache.tokenizer)
