"""Caption metrics from pycocoevalcap, the coco-caption scorers the paper reports.

Nothing here re-implements a metric: BLEU-1..4, METEOR, ROUGE-L and CIDEr-D are pycocoevalcap's
own scorers called on {image_id: [caption]} dictionaries. Generated captions and references must
go through the same tokenisation first: `score_captions` expects both already tokenised (words
joined by spaces); `ptb_tokenize` applies coco-caption's PTB tokenizer (Java) for official numbers.
Without Java it falls back, with a warning, to `python_ptb_tokenize`, a pure-Python stand-in that
splits words and punctuation as the Stanford PTBTokenizer does; the tokenizer used is returned
with the tokens and recorded in every metrics.json (how far its scores are from Java's: docs/measurements.md). Java's
note after each call (`PTBTokenizer tokenized N tokens at ...`) is logged at debug level, not printed (`caption -v`
shows it).

METEOR runs a Java subprocess; if Java is missing, fails or hangs past `meteor_timeout` seconds,
METEOR is reported as missing (NaN) with a warning and every other metric is still produced.

`localisation` scores where the model looked, on data with object boxes (the built-in data's shapes, COCO's
instances): for every generated word that names a label of the data's boxes (the source's word -> label map:
"dogs" -> dog, "man" -> person, "circle" -> circle), whether its attention peak falls inside a box of the named
label (the *attention accuracy*), inside another object's box, on the background, or whether the image holds no
such object at all (a miss), beside two chance levels: a uniformly random location, and a peak on a uniformly
chosen object of the image (0.5 on two-object scenes: what a model that looks at *an* object, not the named one,
scores); and the accuracy per label. `mean_entropy` of α says how sharp it is, on any data.
"""

import contextlib
import logging
import math
import re
import shutil
import subprocess
import threading
import types
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.meteor.meteor import Meteor
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer import ptbtokenizer
from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS, PTBTokenizer

from caption.data.category_words import named_labels
from caption.data.records import Box, ObjectBox

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
METEOR_TIMEOUT = 120.0  # seconds before METEOR counts as missing (Java hung or too slow)
log = logging.getLogger(__name__)


PTB_JAVA = "ptb-java"  # coco-caption's own PTBTokenizer (Stanford CoreNLP 3.4.1): official numbers
PTB_PYTHON = "ptb-python"  # `python_ptb_tokenize`, when Java cannot run
BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}
SPLIT_WORDS = {"cannot": "can not", "gonna": "gon na", "wanna": "wan na", "gotta": "got ta"}
PTB_TOKEN = re.compile(
    r"""(?:[a-z]\.)+(?!\w)                           # u.s., p.m., initials (a.): abbreviations keep their dots
      | (?:mr|mrs|ms|dr|st|jr|sr|vs|mt|etc)\.(?!\w)  # so do titles
      | n't | '(?:s|re|ve|ll|d|m|n')(?!\w)           # contractions: do n't, dog 's, rock 'n' roll
      | \d+(?:[.,:]\d+)+(?!\w)                      # 3.5, 1,000, 5:30
      | [\w@](?:[\w@+/&'-]*[\w+])?                  # words, with inner hyphens, slashes, apostrophes: o'clock
      | \.{2,} | -{2,} | [?!]{2,} | \S                # punctuation: runs of dots, dashes, ?! and single symbols
    """,
    re.VERBOSE,
)
CONTRACTION = re.compile(r"(?<=\w)(?:n't|'(?:s|re|ve|ll|d|m))(?!\w)|(?<=\w)'n'(?=\w)")  # split off first


def python_ptb_caption(caption: str) -> str:
    """One caption as Stanford's PTBTokenizer (-lowerCase) followed by pycocoevalcap's punctuation removal gives it."""
    text = caption.replace("\n", " ").lower().translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))
    text = CONTRACTION.sub(lambda found: f" {found.group(0)} ", text.replace('"', " ").replace("`", " "))
    text = re.sub(r"\b(" + "|".join(SPLIT_WORDS) + r")\b", lambda word: SPLIT_WORDS[word.group(1)], text)
    tokens = (BRACKETS.get(token, "..." if token.startswith("..") else token) for token in PTB_TOKEN.findall(text))
    return " ".join(token for token in tokens if token not in PUNCTUATIONS)


def python_ptb_tokenize(captions: dict[int, list[str]]) -> dict[int, list[str]]:
    """The pure-Python stand-in for coco-caption's PTB tokenizer: {id: [raw]} -> {id: [tokenised]}."""
    return {key: [python_ptb_caption(caption) for caption in value] for key, value in captions.items()}


def ptb_tokenize(captions: dict[int, list[str]]) -> tuple[dict[int, list[str]], str]:
    """coco-caption's PTB tokenizer (lowercases, strips punctuation): {id: [raw]} -> ({id: [tokenised]}, tokenizer).

    The tokenizer is PTB_JAVA, or PTB_PYTHON (with a warning) when Java is missing or cannot run.
    """
    problem = "no `java` on the PATH" if shutil.which("java") is None else None
    if problem is None:
        try:
            entries = {key: [{"caption": caption} for caption in value] for key, value in captions.items()}
            with java_stderr_logged():
                return PTBTokenizer().tokenize(entries), PTB_JAVA
        except OSError as error:
            problem = f"{error.__class__.__name__}: {error}"
    warnings.warn(f"coco-caption's PTB tokenizer cannot run ({problem}): tokenising with the pure-Python stand-in "
                  "instead; scores are close to but not exactly the official ones (install Java for those)")
    return python_ptb_tokenize(captions), PTB_PYTHON


JAVA_NOTE = "PTBTokenizer tokenized"  # the tokenizer's own note after every call: N tokens at M tokens per second
_tokenizer_lock = threading.Lock()  # one call at a time swaps the tokenizer's `subprocess`


class _JavaStderrLogged(subprocess.Popen):
    """The tokenizer's Java process with its stderr read, not printed: its note on the tokens it read is logged at
    debug level (`caption -v` shows it), anything else Java says (an error) as a warning."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "stderr": subprocess.PIPE})

    def communicate(self, *args: Any, **kwargs: Any) -> tuple[bytes, bytes]:
        output, errors = super().communicate(*args, **kwargs)
        for line in (errors or b"").decode(errors="replace").splitlines():
            if line.strip():
                log.log(logging.DEBUG if line.startswith(JAVA_NOTE) else logging.WARNING, "%s", line)
        return output, errors


@contextlib.contextmanager
def java_stderr_logged() -> Iterator[None]:
    """Inside: coco-caption's PTBTokenizer starts Java as `_JavaStderrLogged` (its module's `subprocess` is swapped
    for the duration; nothing else in the process sees a change)."""
    with _tokenizer_lock:
        original = ptbtokenizer.subprocess
        ptbtokenizer.subprocess = types.SimpleNamespace(Popen=_JavaStderrLogged, PIPE=subprocess.PIPE)
        try:
            yield
        finally:
            ptbtokenizer.subprocess = original


def _meteor(references: dict[int, list[str]], candidates: dict[int, list[str]], timeout: float) -> float:
    result: list[float] = []
    scorer: list[Meteor] = []
    failure: list[str] = []

    def run() -> None:
        try:
            scorer.append(Meteor.__new__(Meteor))  # held before __init__ starts Java, so `_stop_meteor` sees it
            scorer[0].__init__()
            result.append(scorer[0].compute_score(references, candidates)[0])
        except Exception as error:  # Java missing or crashed: reported below
            failure.append(f"{error.__class__.__name__}: {error}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    answer, hung = list(result), thread.is_alive()  # before stopping Java: a hung call then fails or ends, and
    if scorer:  # that is no answer
        _stop_meteor(scorer[0])
    if answer:
        return answer[0]
    reason = f"no answer within {timeout:g} s" if hung or not failure else failure[0]
    warnings.warn(f"METEOR is missing ({reason}): its Java subprocess failed or timed out (is Java 17 installed?)")
    return float("nan")


class _StoppedMeteor:
    """What a METEOR scorer becomes once `_stop_meteor` has ended its Java process: nothing left to run at exit."""


def _stop_meteor(scorer: Meteor) -> None:
    """End METEOR's Java process now and reap it, then disarm pycocoevalcap's `Meteor.__del__`: that one waits for a
    lock a failed or hung scoring call never releases (garbage collection then blocks forever), leaves a killed
    process unreaped (a defunct `java`), and raises "Exception ignored" on a scorer whose Java never started."""
    process = getattr(scorer, "meteor_p", None)
    if process is not None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # one that cannot even be reaped: nothing more to do
            process.wait(timeout=10)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    scorer.__class__ = _StoppedMeteor


def score_captions(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = METEOR_TIMEOUT,
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


class PTBCache:
    """coco-caption's PTB tokenisation of captions, each text tokenised once: a caption's tokens depend on it alone
    (one line each), so the references of a split go through Java on the first scoring only and later scorings
    (every validation epoch) send only the candidates not seen yet. Once Java failed, the stand-in is used for good."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}
        self.tokenizer: str | None = None  # PTB_JAVA or PTB_PYTHON, once something was tokenised

    def tokenize(self, texts: Iterable[str]) -> dict[str, str]:
        """{text: its PTB tokens joined by spaces} for `texts`, with one tokenizer call at most (none when all were
        seen before)."""
        texts = set(texts)
        missing = sorted(texts - self.tokens.keys())
        if missing:
            lines = dict(enumerate(missing))
            if self.tokenizer == PTB_PYTHON:
                tokenized, tokenizer = python_ptb_tokenize({key: [text] for key, text in lines.items()}), PTB_PYTHON
            else:
                tokenized, tokenizer = ptb_tokenize({key: [text] for key, text in lines.items()})
            if self.tokenizer is not None and tokenizer != self.tokenizer:  # Java went away: all with the stand-in
                self.tokens = {}
            self.tokenizer = tokenizer
            self.tokens.update((text, tokenized[key][0]) for key, text in lines.items())
            if not texts <= self.tokens.keys():
                return self.tokenize(texts)
        return {text: self.tokens[text] for text in texts}


def coco_scores(
    candidates: dict[int, str],
    references: dict[int, list[str]],
    *,
    metrics: Iterable[str] = METRICS,
    meteor_timeout: float = METEOR_TIMEOUT,
    cache: PTBCache | None = None,
) -> tuple[dict[str, float], str]:
    """Official coco-caption numbers: raw candidates and raw references through the PTB tokenizer (`cache`: one
    that keeps the tokens of earlier calls), then scored. Returns (scores, the tokenizer used: PTB_JAVA or
    PTB_PYTHON)."""
    cache = PTBCache() if cache is None else cache
    tokens = cache.tokenize([*candidates.values(), *(text for texts in references.values() for text in texts)])
    hypotheses = {key: tokens[caption] for key, caption in candidates.items()}
    references = {key: [tokens[text] for text in texts] for key, texts in references.items()}
    scores = score_captions(hypotheses, references, metrics=metrics, meteor_timeout=meteor_timeout)
    return scores, str(cache.tokenizer)


def attention_grid(locations: int, image_size: tuple[int, int]) -> tuple[int, int]:
    """(rows, columns) of the encoder's grid of L locations for an (H, W) input: rows·columns = L, same aspect."""
    height, width = image_size
    rows = max(1, round(math.sqrt(locations * height / width)))
    if locations % rows:
        raise ValueError(f"{locations} attention locations do not form a grid shaped like a {height}x{width} image")
    return rows, locations // rows


def location_center(location: int, grid: tuple[int, int], image_size: tuple[int, int]) -> tuple[float, float]:
    """Pixel (x, y) of the centre of grid cell `location` (row-major, as the encoder flattens its feature map)."""
    (rows, columns), (height, width) = grid, image_size
    row, column = divmod(int(location), columns)
    return (column + 0.5) * width / columns, (row + 0.5) * height / rows


Captions = Iterable[tuple[Sequence[str], torch.Tensor, Sequence[ObjectBox]]]  # per image: words, α (T, L), boxes


@dataclass(frozen=True)
class LabelAccuracy:
    """The attention accuracy of the generated words naming one label."""

    nouns: int  # generated words naming the label, in the image or not
    accuracy: float  # the share whose peak lies inside a box of the label
    chance_location: float  # the accuracy of a uniformly random location on the same words


@dataclass(frozen=True)
class Localisation:
    """Where the attention peak of each generated object noun lies, as shares of those nouns (they sum to 1)."""

    nouns: int  # generated words naming a label of the data, in the image or not
    accuracy: float  # the peak lies inside a box of the named label
    other_object: float  # inside another object's box
    background: float  # inside no object's box
    absent: float  # the image holds no object of that label: a miss
    chance_location: float  # the accuracy of a uniformly random location on the same nouns
    chance_object: float  # the accuracy of a peak on a uniformly chosen object of the image
    by_label: dict[str, LabelAccuracy] = field(default_factory=dict)  # label -> its words' accuracy
    box_labels: tuple[str, ...] = ()  # the labels of the images' boxes, sorted: what the words could have named

    def scores(self) -> dict[str, float]:
        """The shares under their logged names (attention_accuracy, attention_other_object, ...)."""
        return {f"attention_{item.name}": float(getattr(self, item.name)) for item in fields(self)
                if item.name not in ("nouns", "by_label", "box_labels")}


def cell_centres(locations: int, image_size: tuple[int, int]) -> list[tuple[float, float]]:
    """Pixel (x, y) centre of each of the encoder's L grid cells, in row-major order."""
    grid = attention_grid(locations, image_size)
    return [location_center(location, grid, image_size) for location in range(locations)]


def inside(box: Box, point: tuple[float, float]) -> bool:
    x0, y0, x1, y1 = box
    return x0 <= point[0] < x1 and y0 <= point[1] < y1  # x1/y1 exclusive


def localisation(captions: Captions, *, image_size: tuple[int, int], word_labels: Mapping[str, str]) -> Localisation:
    """Where each generated word naming a label of the images' boxes looked.

    `captions` holds, per image, the generated words, their attention α (T, L) and the image's boxes in the frame
    of the encoder input, whose (H, W) is `image_size` (`CaptionSource.input_boxes`); `word_labels` maps caption
    words (and two-word phrases, `named_labels`) to the labels the data has boxes for (`CaptionSource.word_labels`):
    a word of the map whose label the image has no box of is a miss (absent). The shares are NaN when no generated
    word names a label.
    """
    counts = {"accuracy": 0, "other_object": 0, "background": 0, "absent": 0}
    chance_location = chance_object = 0.0
    per_label: dict[str, list[float]] = {}  # label -> [nouns, hits, chance_location]
    box_labels: set[str] = set()
    for words, alpha, boxes in captions:
        box_labels.update(box.label for box in boxes)
        centres = cell_centres(alpha.shape[-1], image_size)
        for label, weights in zip(named_labels(words, word_labels), alpha):
            if label is None:
                continue
            tally = per_label.setdefault(label, [0, 0, 0.0])
            tally[0] += 1
            named = [box.box for box in boxes if box.label == label]
            if not named:
                counts["absent"] += 1
                continue
            peak = centres[int(weights.argmax())]
            hit = any(inside(box, peak) for box in named)
            if hit:
                counts["accuracy"] += 1
            elif any(inside(other.box, peak) for other in boxes if other.label != label):
                counts["other_object"] += 1
            else:
                counts["background"] += 1
            location = sum(any(inside(box, centre) for box in named) for centre in centres) / len(centres)
            chance_location += location
            chance_object += len(named) / len(boxes)
            tally[1] += hit
            tally[2] += location
    nouns = sum(counts.values())
    share = (lambda count: count / nouns) if nouns else (lambda count: float("nan"))
    by_label = {label: LabelAccuracy(int(count), hits / count, location / count)
                for label, (count, hits, location) in sorted(per_label.items())}
    return Localisation(nouns=nouns, **{name: share(count) for name, count in counts.items()},
                        chance_location=share(chance_location), chance_object=share(chance_object), by_label=by_label,
                        box_labels=tuple(sorted(box_labels)))


def step_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """H(α_t) = -Σ_i α_ti log α_ti of each step, in nats (log L for uniform attention): α (T, L) -> (T,)."""
    return -(alpha * alpha.clamp(min=1e-12).log()).sum(-1)


def mean_entropy(entropies: Iterable[torch.Tensor]) -> float:
    """The mean over every generated step of per-caption `step_entropy`s; NaN without any step. Summed in float64, so
    the order the ranks gathered the captions in does not change the figure."""
    steps = torch.cat([torch.zeros(0, dtype=torch.float64), *(entropy.double() for entropy in entropies)])
    return float(steps.mean()) if len(steps) else float("nan")
