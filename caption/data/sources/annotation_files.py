"""Reading the JSON annotation files of datasets: one-line errors that name the file and the field; captions made
writable (`caption_text`)."""

from __future__ import annotations

import json
import os
import reprlib
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from caption.errors import CaptionError, CaptionWarning
from caption.io.outputs import LONE_SURROGATE

REPLACEMENT_CHARACTER = "\ufffd"  # what a lone surrogate of a caption becomes


class DatasetFormatError(CaptionError, ValueError):
    """An annotation or split file that is not in the expected format; the message names the file and field."""


def read_json(path: str) -> Any:
    """Parse a JSON file of UTF-8 (a byte-order mark first is skipped); a missing or malformed file raises
    `DatasetFormatError` naming it."""
    if not os.path.isfile(path):
        raise DatasetFormatError(f"{path} does not exist (see data/README.md for where dataset files go)")
    try:
        with open(path, encoding="utf-8-sig") as file:  # UTF-8, with or without the byte-order mark some editors write
            return json.load(file)
    except (ValueError, RecursionError) as error:  # malformed, not UTF-8, an integer of over 4300 digits, too deep
        raise DatasetFormatError(f"{path} is not valid UTF-8 JSON: {type(error).__name__}: {error}") from None


def shown(value: Any) -> str:
    """`value` as Python writes it, cut short (a message names a value of a file, not all of it)."""
    short = reprlib.Repr()
    short.maxlist, short.maxdict, short.maxstring, short.maxother, short.maxlong = 8, 4, 60, 60, 60
    return short.repr(value)


def field(entry: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`entry[name]`, which must exist and have type `kind`; `where` locates the entry in error messages."""
    if not isinstance(entry, dict) or name not in entry:
        raise DatasetFormatError(f"{where} has no {name!r} field")
    value = entry[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DatasetFormatError(f"{where}.{name} is {shown(value)}; expected {getattr(kind, '__name__', kind)}")
    return value


def caption_text(text: str, *, where: str, replaced: list[str]) -> str:
    """A caption read from a dataset file, each lone UTF-16 surrogate in it ("\\ud800": a valid JSON escape, but no
    character, which no UTF-8 writer can encode, the PTB tokenizer's that scores val and test captions included)
    replaced by U+FFFD.

    text: the caption as read.
    where: its place in the file (entry, caption and image), added to `replaced` when a surrogate was replaced.
    replaced: the places of the captions replaced so far, for `warn_replaced`.
    """
    if LONE_SURROGATE.search(text) is None:
        return text
    replaced.append(where)
    return LONE_SURROGATE.sub(REPLACEMENT_CHARACTER, text)


def warn_replaced(replaced: list[str], *, path: str) -> None:
    """One warning for the captions of the dataset file `path` whose lone surrogates `caption_text` replaced (none: no
    warning), naming the first."""
    if replaced:
        held = "1 caption holds" if len(replaced) == 1 else f"{len(replaced)} captions hold"
        rank_zero_warn(f"{path}: {held} a lone UTF-16 surrogate (a \\ud800-\\udfff escape, which is no character), "
                       f"the first at {replaced[0]}: replaced by U+FFFD; fix the file to keep the words meant there",
                       category=CaptionWarning)
