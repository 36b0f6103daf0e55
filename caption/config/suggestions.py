""""Did you mean": the known name closest to a mistyped command, config or option.

    closest("fti", ["fit", "test"])                                      # "fit"
    closest("--model.decoder.hiden_dim", ["--model.decoder.hidden_dim"])  # "--model.decoder.hidden_dim"
    closest("--bream_size", ["--model.decoding.beam_size"])              # its last dotted part: the same knob

difflib's ratio on the whole name; an option's last dotted part must be close too (a shared `--model.decoder.` makes
any two options of a group look alike), and an option close to none by its whole name is matched by that part alone.
"""

import difflib
from collections.abc import Iterable

CUTOFF = 0.6  # the least difflib ratio of a suggestion (difflib's own): `fti` for fit, a letter off, one doubled
PART_CUTOFF = 0.75  # the least ratio of an option matched by its last part alone (its group spelled otherwise)


def last_part(name: str) -> str:
    """The last dotted part of an option, without its dashes: "beam_size" of "--model.decoding.beam_size"."""
    return name.rsplit(".", 1)[-1].lstrip("-")


def similarity(first: str, second: str) -> float:
    return difflib.SequenceMatcher(None, first, second).ratio()


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to `word` (for an option, `--...`: with a close last part), or None when none is close
    enough."""
    names = sorted(set(known))
    matches = difflib.get_close_matches(word, names, n=len(names) or 1, cutoff=CUTOFF)
    if not word.startswith("-"):
        return matches[0] if matches else None
    near = [name for name in matches if similarity(last_part(word), last_part(name)) >= CUTOFF]
    if near:
        return near[0]
    by_part: dict[str, str] = {}
    for name in names:
        by_part.setdefault(last_part(name), name)
    parts = difflib.get_close_matches(last_part(word), list(by_part), n=1, cutoff=PART_CUTOFF)
    return by_part[parts[0]] if parts else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """"did you mean X?" for the known name closest to `word`, or "" when none is close enough."""
    match = closest(word, known)
    return f"did you mean {match}?" if match else ""
