"""What self-critical training is known to do to captions, measured on a split's captions against its references.

Optimising CIDEr-D can teach a captioner habits no reference has: captions that end in a dangling word ("a red
circle and a": the reward's n-grams do not punish a cut-off end unless <end> is counted as a word), repeated n-grams
("a red circle a red circle"), and a collapse to a few safe captions said of many images. Each is a share of the
split's captions, compared with the same share of the references (one per image, the first), and said in one
warning line when the captions have clearly more of the habit than the references:

    dangling_ending     captions whose last word is a function word (DANGLING)
    repeated_trigram    captions holding some word trigram twice
    distinct_captions   distinct captions / images (lower is worse: a collapse)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

DANGLING = frozenset(["a", "an", "the", "and", "or", "of", "with", "on", "in", "at", "to", "by", "for", "from", "near",
                      "its", "their", "his", "her"])
MARGIN = 0.02  # a habit's share this much above the references' is said
COLLAPSE = 0.5  # distinct captions under this share of the references' distinct share is said


def dangling_ending(captions: Sequence[Sequence[str]]) -> float:
    """The share of captions whose last word is a function word."""
    return share(bool(words) and words[-1] in DANGLING for words in captions)


def repeated_trigram(captions: Sequence[Sequence[str]]) -> float:
    """The share of captions that hold some word trigram more than once."""
    def repeats(words: Sequence[str]) -> bool:
        trigrams = list(zip(words, words[1:], words[2:]))
        return len(set(trigrams)) < len(trigrams)
    return share(repeats(words) for words in captions)


def distinct_captions(captions: Sequence[Sequence[str]]) -> float:
    """Distinct captions / captions (one per image)."""
    return len({tuple(words) for words in captions}) / len(captions) if captions else float("nan")


HABITS = {"dangling_ending": dangling_ending, "repeated_trigram": repeated_trigram,
          "distinct_captions": distinct_captions}


def share(flags: Iterable[bool]) -> float:
    values = list(flags)
    return sum(values) / len(values) if values else float("nan")


def habits(captions: Sequence[Sequence[str]]) -> dict[str, float]:
    """Each habit's figure for these captions (word lists, one per image)."""
    return {name: measure(captions) for name, measure in HABITS.items()}


def habit_warnings(found: dict[str, float], references: dict[str, float], *, split: str) -> list[str]:
    """One line per habit the captions have clearly more of than the references (`found`, `references`: `habits`)."""
    lines = []
    for name in ("dangling_ending", "repeated_trigram"):
        if found[name] > references[name] + MARGIN:
            lines.append(f"{found[name]:.1%} of the {split} captions have a {name.replace('_', ' ')} "
                         f"(references: {references[name]:.1%}) ({name}): the captioner learnt a habit the "
                         "references do not have; see docs/self-critical.md")
    if found["distinct_captions"] < COLLAPSE * references["distinct_captions"]:
        lines.append(f"distinct_captions: only {found['distinct_captions']:.1%} of the {split} captions differ "
                     f"(references: {references['distinct_captions']:.1%}): the captioner says a few captions of "
                     "many images; see docs/self-critical.md")
    return lines
