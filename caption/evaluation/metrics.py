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

SPICE (`TEST_METRICS`: what `caption test`, `validate` and `evaluate` ask for) is pycocoevalcap's SPICE jar, run as
its `Spice` scorer runs it, only where Java is on the PATH and its jars are in pycocoevalcap's package folder
(`spice_files`: spice-1.0.jar and the Stanford CoreNLP 3.6.0 jars, about 400 MB, that pycocoevalcap's
`get_stanford_models` downloads). Nothing here ever downloads them: `Spice()` itself would (its `__init__` calls
`get_stanford_models`), so it is never made; and its captions go to a temporary folder of ours, removed whatever
happens, not to pycocoevalcap's package folder (`spice_score`). Without them, or when its Java run fails or gives no
answer within `spice_timeout` seconds, SPICE is absent from the scores and the reason is recorded instead (`absent`;
metrics.json's "absent_metrics"), with a warning when it failed. How to install them: docs/attention.md, "From the
command line".
"""

import json
import logging
import math
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pycocoevalcap.bleu.bleu_scorer import BleuScorer
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.spice import get_stanford_models as stanford_models
from pycocoevalcap.spice import spice as pycocoevalcap_spice

from caption.evaluation.image_scores import BLEU_N, ImageScores, bleu_counts
from caption.evaluation.meteor import meteor_score
from caption.evaluation.ptb_tokenizer import PTBCache

log = logging.getLogger(__name__)

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
SPICE = "spice"
TEST_METRICS = (*METRICS, SPICE)  # a test's metrics: SPICE too, where it can run (else absent, with the reason)
METEOR_TIMEOUT = 120.0  # seconds before METEOR counts as missing (Java hung or too slow)
# seconds before SPICE counts as missing (Java hung or too slow): a full COCO test split takes minutes, and the
# other ranks of a distributed test wait for rank 0's scoring at most torch's default 30 minutes
SPICE_TIMEOUT = 1200.0
SPICE_COMMAND = ("java", "-jar", "-Xmx8G")  # then the jar and its arguments, as pycocoevalcap's `Spice` runs it
SPICE_HOWTO = "docs/attention.md, \"From the command line\""


class MetricAbsent(Exception):
    """A metric that cannot be computed here; the message says why."""


class MetricFailed(MetricAbsent):
    """A metric whose tools are installed but whose run failed; the message says how."""


def spice_files() -> tuple[Path, ...]:
    """The files pycocoevalcap's SPICE runs with, in its package folder: spice-1.0.jar, and the Stanford CoreNLP jar
    and models jar its `get_stanford_models` downloads into spice/lib."""
    folder = Path(pycocoevalcap_spice.__file__).parent
    corenlp = folder / stanford_models.SPICELIB / stanford_models.JAR
    return (folder / pycocoevalcap_spice.SPICE_JAR, corenlp.with_name(f"{corenlp.name}.jar"),
            corenlp.with_name(f"{corenlp.name}-models.jar"))


def spice_missing() -> str | None:
    """Why SPICE cannot run here (no Java, or a jar of `spice_files` not installed), or None when it can."""
    if shutil.which("java") is None:
        return "no `java` on the PATH"
    absent = [path for path in spice_files() if not path.is_file()]
    if absent:
        names = ", ".join(path.name for path in absent)
        return (f"{names} not in {absent[0].parent} (pycocoevalcap downloads Stanford CoreNLP, about 400 MB, at "
                f"SPICE's first run; this project never does: install it once as {SPICE_HOWTO} says)")
    return None


def spice_score(references: dict[int, list[str]], candidates: dict[int, list[str]], *, timeout: float) -> float:
    """SPICE of `candidates` against `references` (tokenised, {image_id: [caption]}), as pycocoevalcap's `Spice`
    scores it; `MetricAbsent` with the reason when it cannot run here (`spice_missing`), `MetricFailed` when its Java
    run fails or gives no answer within `timeout` seconds (then ended). Never downloads anything.

    pycocoevalcap's `compute_score` writes the captions into its package folder (spice/tmp, left there when Java fails)
    and has no way to choose another; so its SPICE jar is run here as it runs it, on files in a temporary folder of
    our own that is removed whatever happens, and without its `-cache` of parses in spice/cache (a database that
    grows in the package folder, and whose native library fails to load on some machines)."""
    missing = spice_missing()
    if missing is not None:
        raise MetricAbsent(missing)
    image_ids = sorted(references)
    if sorted(candidates) != image_ids:
        raise ValueError("candidates and references must cover the same image ids")
    spice_jar = spice_files()[0]
    with tempfile.TemporaryDirectory(prefix="caption-spice-") as folder:
        captions, scores = Path(folder) / "captions.json", Path(folder) / "scores.json"
        captions.write_text(json.dumps([{"image_id": key, "test": candidates[key][0], "refs": references[key]}
                                        for key in image_ids]), encoding="utf-8")
        run_spice_java([*SPICE_COMMAND, str(spice_jar), str(captions), "-out", str(scores), "-subset", "-silent"],
                       folder=spice_jar.parent, timeout=timeout)
        try:
            results = json.loads(scores.read_text(encoding="utf-8"))
            return float(np.mean([spice_figure(item["scores"]["All"]["f"]) for item in results]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise MetricFailed(f"its scores could not be read ({error.__class__.__name__}: {error})") from None


def spice_figure(value: Any) -> float:
    """One image's SPICE F-score as pycocoevalcap reads it: a number, NaN when Java gave none (null)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def run_spice_java(command: list[str], *, folder: Path, timeout: float) -> None:
    """Run SPICE's Java `command` in `folder` with its output captured (Java's stderr logged at debug level);
    `MetricFailed` naming Java's error when it fails, or when it gives no answer within `timeout` seconds (it is
    then killed and reaped)."""
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise MetricFailed(f"its Java run gave no answer within {timeout:g} s") from None
    except OSError as error:
        raise MetricFailed(f"its Java run could not start ({error.__class__.__name__}: {error})") from None
    log.debug("SPICE: %s", done.stderr.decode(errors="replace").strip())
    if done.returncode != 0:
        raise MetricFailed(f"its Java run failed ({java_error(done.stderr)}; SPICE 1.0 was built for Java 8)")


def java_error(stderr: bytes | str | None) -> str:
    """The line of a Java run's stderr that names its error (the first exception or error), else its last line."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if "Exception" in line or "Error" in line]
    return (named or lines or ["no error output"])[0][:300]


def score_captions(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = METEOR_TIMEOUT,
    spice_timeout: float = SPICE_TIMEOUT,
    per_image: ImageScores | None = None,
    absent: dict[str, str] | None = None,
) -> dict[str, float]:
    """Corpus scores of one tokenised candidate per image against its tokenised references.

    Only the requested `metrics` (names from TEST_METRICS) are computed; METEOR and SPICE are the slow ones, each
    given up after its timeout (`meteor_timeout`, `spice_timeout`: seconds).
    `per_image`: filled with the image ids and what BLEU and CIDEr-D are made of, image by image (when they are
    computed). `absent`: filled with {metric: why} for each requested metric left out of the scores (SPICE where it
    cannot run).
    """
    metrics = set(metrics)
    unknown = metrics - set(TEST_METRICS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {TEST_METRICS}")
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
    if SPICE in metrics:
        try:
            scores[SPICE] = spice_score(references, hypotheses, timeout=spice_timeout)
        except MetricAbsent as why:
            note_absent(SPICE, why, absent)
    return {name: scores[name] for name in TEST_METRICS if name in metrics and name in scores}  # SPICE: maybe not


def note_absent(metric: str, why: MetricAbsent, absent: dict[str, str] | None) -> None:
    """Record why `metric` is not in the scores: in `absent`, and in the log; a warning when its run failed (as
    METEOR's failures are), not when it is only not installed (the default)."""
    if absent is not None:
        absent[metric] = str(why)
    if isinstance(why, MetricFailed):
        warnings.warn(f"{metric.upper()} is missing ({why}): left out of the scores, the reason in metrics.json's "
                      "absent_metrics")
    else:
        log.info("%s is not computed: %s", metric.upper(), why)


def coco_scores(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = METEOR_TIMEOUT,
    spice_timeout: float = SPICE_TIMEOUT,
    cache: PTBCache | None = None,
    per_image: ImageScores | None = None,
    absent: dict[str, str] | None = None,
) -> tuple[dict[str, float], str]:
    """Official coco-caption numbers: raw candidates and raw references through the PTB tokenizer (`cache`: one
    that keeps the tokens of earlier calls), then scored (`per_image`, `absent`: filled as `score_captions` fills
    them). Returns (scores, the tokenizer used: PTB_JAVA or PTB_PYTHON)."""
    cache = PTBCache() if cache is None else cache
    tokens = cache.tokenize([*candidates.values(), *(text for texts in references.values() for text in texts)])
    hypotheses = {key: tokens[caption] for key, caption in candidates.items()}
    references = {key: [tokens[text] for text in texts] for key, texts in references.items()}
    scores = score_captions(hypotheses, references, metrics=metrics, meteor_timeout=meteor_timeout,
                            spice_timeout=spice_timeout, per_image=per_image, absent=absent)
    return scores, str(cache.tokenizer)
