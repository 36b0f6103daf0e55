"""Reading the JSON annotation files of datasets: one-line errors that name the file and the field."""

from __future__ import annotations

import json
import os
import reprlib
from typing import Any

from caption.errors import CaptionError


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
