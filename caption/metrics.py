"""Caption metrics from pycocoevalcap, the coco-caption scorers the paper reports.

Nothing here re-implements a metric: BLEU-1..4, METEOR, ROUGE-L and CIDEr-D are pycocoevalcap's
own scorers called on {image_id: [caption]} dictionaries. Generated captions and references must
go through the same tokenisation first: `score_captions` expects both already tokenised (words
joined by spaces); `ptb_tokenize` applies coco-caption's PTB tokenizer (Java) for official numbers.

METEOR runs a Java subprocess; if Java is missing, fails or hangs past `meteor_timeout` seconds,
METEOR is reported as missing (NaN) with a warning and every other metric is still produced.
"""

import threading
import warnings
from collections.abc import Iterable

from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.meteor.meteor import Meteor
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")


def ptb_tokenize(captions: dict[int, list[str]]) -> dict[int, list[str]]:
    """coco-caption's PTB tokenizer (lowercases, strips punctuation): {id: [raw]} -> {id: [tokenised]}."""
    return PTBTokenizer().tokenize({key: [{"caption": c} for c in value] for key, value in captions.items()})


def _meteor(references: dict[int, list[str]], candidates: dict[int, list[str]], timeout: float) -> float:
    result: list[float] = []
    scorer: list[Meteor] = []

    def run() -> None:
        scorer.append(Meteor())
        result.append(Meteor.compute_score(scorer[0], references, candidates)[0])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if result:
        return result[0]
    if scorer:  # still running: stop the Java process so the thread unblocks
        scorer[0].meteor_p.kill()
    warnings.warn("METEOR is missing: its Java subprocess failed or timed out (is Java 17 installed?)")
    return float("nan")


def score_captions(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = 120.0,
) -> dict[str, float]:
    """Corpus scores of one tokenised candidate per image against its tokenised references.

    Only the requested `metrics` (names from METRICS) are computed; METEOR is the slow one.
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
    scores: dict[str, float] = {}
    if metrics & {"bleu1", "bleu2", "bleu3", "bleu4"}:
        bleu, _ = Bleu(4).compute_score(references, hypotheses, verbose=0)
        scores.update({f"bleu{n + 1}": float(value) for n, value in enumerate(bleu)})
    if "meteor" in metrics:
        scores["meteor"] = _meteor(references, hypotheses, meteor_timeout)
    if "rouge_l" in metrics:
        scores["rouge_l"] = float(Rouge().compute_score(references, hypotheses)[0])
    if "cider" in metrics:
        scores["cider"] = float(Cider().compute_score(references, hypotheses)[0])
    return {name: scores[name] for name in METRICS if name in metrics}
