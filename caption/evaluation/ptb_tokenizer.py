"""coco-caption's PTB tokenisation of captions, which the scores of `caption.evaluation.metrics` need first, and its
cache.

`ptb_tokenize` applies coco-caption's PTB tokenizer (Java) for official numbers. Without Java it falls back, with a
warning, to `python_ptb_tokenize`, a pure-Python stand-in that splits words and punctuation as the Stanford
PTBTokenizer does; the tokenizer used is returned with the tokens and recorded in every metrics.json (how far its
scores are from Java's: docs/measurements.md). Java's note after each call (`PTBTokenizer tokenized N tokens at
...`) is logged at debug level, not printed (`caption -v` shows it). `PTBCache` tokenises each text once.
"""

import logging
import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path

from pycocoevalcap.tokenizer import ptbtokenizer
from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS, STANFORD_CORENLP_3_4_1_JAR

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
            return java_ptb_tokenize(captions, timeout=PTB_TIMEOUT), PTB_JAVA
        except OSError as error:
            problem = f"{error.__class__.__name__}: {error}"
    warnings.warn(f"coco-caption's PTB tokenizer cannot run ({problem}): tokenising with the pure-Python stand-in "
                  "instead; scores are close to but not exactly the official ones (install Java for those)")
    return python_ptb_tokenize(captions), PTB_PYTHON


PTB_TIMEOUT = 600.0  # seconds before a Java run counts as hung (COCO's 25,000 test references take about 10 s)
JAVA_NOTE = "PTBTokenizer tokenized"  # the tokenizer's own note after every call: N tokens at M tokens per second
# pycocoevalcap's PTBTokenizer.tokenize runs this, then the file of the captions (one a line)
PTB_COMMAND = ("java", "-cp", STANFORD_CORENLP_3_4_1_JAR, "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines",
               "-lowerCase")


def java_ptb_tokenize(captions: dict[int, list[str]], *, timeout: float = PTB_TIMEOUT) -> dict[int, list[str]]:
    """{id: [raw]} -> {id: [tokenised]} as pycocoevalcap's `PTBTokenizer().tokenize` gives them: its Java command, its
    jar, its punctuation removal. Run here rather than through it, which writes the captions into its package folder
    and prints Java's note: the captions go to a temporary folder of our own, removed whatever happens, and Java's
    note is logged at debug level (`caption -v` shows it), anything else it says (an error) as a warning. OSError
    when Java cannot start, fails, or gives no answer within `timeout` seconds (the run is then ended)."""
    keys = [key for key, texts in captions.items() for _ in texts]
    sentences = "\n".join(text.replace("\n", " ") for texts in captions.values() for text in texts)
    with tempfile.TemporaryDirectory(prefix="caption-ptb-") as folder:
        file = Path(folder) / "captions.txt"
        file.write_text(sentences, encoding="utf-8")
        try:
            done = subprocess.run([*PTB_COMMAND, str(file)], cwd=Path(ptbtokenizer.__file__).parent,
                                  capture_output=True, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:  # run() has killed it
            raise OSError(f"its Java run gave no answer within {timeout:g} s") from None
    for line in done.stderr.decode(errors="replace").splitlines():
        if line.strip():
            log.log(logging.DEBUG if line.startswith(JAVA_NOTE) else logging.WARNING, "%s", line)
    if done.returncode != 0:
        raise OSError(f"its Java run ended with exit status {done.returncode}")
    tokenized: dict[int, list[str]] = {}
    for key, line in zip(keys, done.stdout.decode().split("\n")):
        words = line.rstrip().split(" ")
        tokenized.setdefault(key, []).append(" ".join(word for word in words if word not in PUNCTUATIONS))
    return tokenized


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
