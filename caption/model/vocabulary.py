"""Tokenisation and vocabulary shared by every data source.

All captions (training targets, references used for scoring, generated text)
go through the same :func:`tokenize`, so that BLEU and friends compare like
with like. The tokenizer is NLTK's Treebank tokenizer, which is purely
rule-based and needs no downloaded NLTK data.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable

from nltk.tokenize import TreebankWordTokenizer

from caption.errors import CheckpointError

_TOKENIZER = TreebankWordTokenizer()
# Most captions are plain ("A man riding a wave on top of a surfboard."): lowercase letters, digits, spaces, commas
# and one final period. The Treebank tokenizer splits those at spaces, commas and the final period, so splitting there
# directly gives its tokens without its regular expressions (docs/coco-rehearsal.md). Left to it: a comma before a
# digit or another comma (kept attached), its contractions ("cannot" -> "can not", "gonna" -> "gon na", ...) and
# anything else.
_PLAIN = re.compile(r"[a-z0-9 ,]*\.? *")
_NOT_PLAIN = re.compile(r",[\d,]|cannot|gimme|gonna|gotta|lemme|wanna")


def tokenize(text: str) -> list[str]:
    """Lowercase ``text``, split it into words and drop pure-punctuation tokens.

    A token is kept if it contains at least one letter or digit, so "n't" and
    "3d" survive while ".", "--" and the Treebank quote tokens "``"/"''" do not.
    Non-ASCII letters count as letters ("café" is kept as one token).
    """
    lowered = text.lower()
    if _PLAIN.fullmatch(lowered) and not _NOT_PLAIN.search(lowered):
        return lowered.replace(",", " ").replace(".", " ").split()
    tokens = _TOKENIZER.tokenize(lowered)
    return [token for token in tokens if any(ch.isalnum() for ch in token)]


class Vocabulary:
    """A bijection between words and integer ids, with four special tokens.

    Ids 0-3 are always ``<pad>``, ``<start>``, ``<end>`` and ``<unk>``; the
    ordinary words follow, most frequent first. Build it with
    :meth:`Vocabulary.build` and store it with :meth:`to_list` (inside a
    checkpoint) or :meth:`to_json` (the text of a JSON file, which its
    caller writes).
    """

    PAD, START, END, UNK = 0, 1, 2, 3
    PAD_TOKEN, START_TOKEN, END_TOKEN, UNK_TOKEN = "<pad>", "<start>", "<end>", "<unk>"
    SPECIALS = (PAD_TOKEN, START_TOKEN, END_TOKEN, UNK_TOKEN)

    def __init__(self, words: list[str]) -> None:
        """Wrap ``words``, the id-to-word list, which must begin with the specials."""
        words = list(words)
        if tuple(words[: len(self.SPECIALS)]) != self.SPECIALS:
            raise ValueError(f"vocabulary must start with {list(self.SPECIALS)}, got {words[:4]}")
        if not all(isinstance(word, str) for word in words):
            raise ValueError("vocabulary words must all be strings")
        if len(set(words)) != len(words):
            duplicates = sorted(word for word, n in Counter(words).items() if n > 1)
            raise ValueError(f"vocabulary has duplicate words: {duplicates[:10]}")
        self.itos: list[str] = words
        self.stoi: dict[str, int] = {word: i for i, word in enumerate(words)}

    @classmethod
    def build(
        cls,
        token_lists: Iterable[list[str]],
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Count words in ``token_lists`` and keep the frequent ones.

        Build from the TRAINING captions only: words seen only in validation or
        test captions must map to ``<unk>``, as they would for a deployed model.

        Words with a count of at least ``min_count`` are kept, most frequent
        first, ties broken alphabetically, so the result depends only on the
        multiset of tokens and not on their order. ``max_size`` caps the number
        of ordinary words; the four special tokens are not counted in it, so
        ``len(vocab) <= max_size + 4``. Tokens equal to a special token's name
        are ignored.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0 or None, got {max_size}")
        counts = Counter(token for tokens in token_lists for token in tokens)
        for special in cls.SPECIALS:
            counts.pop(special, None)
        kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        if max_size is not None:
            kept = kept[:max_size]
        return cls([*cls.SPECIALS, *kept])

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: object) -> bool:
        return word in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    def encode(self, tokens: list[str]) -> list[int]:
        """Map tokens to ids framed by ``<start>`` and ``<end>``; unknown words become ``<unk>``."""
        ids = [self.stoi.get(token, self.UNK) for token in tokens]
        return [self.START, *ids, self.END]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Map ids back to words, skipping ``<start>``/``<pad>`` and stopping at ``<end>``.

        Elements may be anything ``int()`` accepts, e.g. 0-d tensors.
        """
        words = []
        for i in map(int, ids):
            if i == self.END:
                break
            if i not in (self.START, self.PAD):
                words.append(self.itos[i])
        return words

    def to_list(self) -> list[str]:
        """The id-to-word list, a plain ``list[str]`` safe for ``torch.load(weights_only=True)``."""
        return list(self.itos)

    @classmethod
    def from_list(cls, words: list[str]) -> Vocabulary:
        """Inverse of :meth:`to_list`."""
        return cls(words)

    def to_json(self) -> str:
        """The vocabulary as the text of a JSON file: ``{"words": [...]}``."""
        return json.dumps({"words": self.itos}, ensure_ascii=False, indent=0)

    @classmethod
    def from_json(cls, text: str, *, origin: str | os.PathLike) -> Vocabulary:
        """Inverse of :meth:`to_json`, for ``text`` read from the file ``origin``.

        Raises ``ValueError`` naming ``origin`` if ``text`` is not valid JSON of
        the expected form.
        """
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("words"), list):
                raise ValueError('expected a JSON object with a "words" list')
            return cls(data["words"])
        except ValueError as error:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"malformed vocabulary file {origin}: {error}") from error


def check_vocabulary(saved: list[str], built: list[str], *, problem: str, fix: str) -> None:
    """The one check that a checkpoint's vocabulary (`saved`) is the one this run built (`built`): a CheckpointError
    "{problem} (how they differ): {fix}" if not."""
    if saved != built:
        raise CheckpointError(f"{problem} ({vocabulary_difference(saved, built)}): {fix}")


def vocabulary_difference(saved: list[str], built: list[str], *, shown: int = 5) -> str:
    """How two vocabularies (word lists) differ, naming words: those in only one, or the first out of order."""
    saved_words, built_words = set(saved), set(built)
    only_saved = [word for word in saved if word not in built_words]
    only_built = [word for word in built if word not in saved_words]
    if not only_saved and not only_built:
        index = next(i for i, (one, other) in enumerate(zip(saved, built)) if one != other)
        return f"the same {len(saved)} words in another order: word {index} is {saved[index]!r} vs {built[index]!r}"
    parts = [f"{len(words)} words only in the {where} ({', '.join(words[:shown])}{', ...' * (len(words) > shown)})"
             for words, where in ((only_saved, "checkpoint"), (only_built, "data")) if words]
    return f"{len(saved)} vs {len(built)} words; " + "; ".join(parts)
