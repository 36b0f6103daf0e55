"""Which caption words name which category of a dataset's boxes: the word -> label map that attention accuracy needs,
for the categories of any COCO-format instances file.

- Each category names itself, singular and plural (`caption.data.sources.coco_categories.plural`), in lower case:
  "house", "houses", "table lamp", "table lamps" (a name of two words is matched at its last word:
  `named_labels`).
- A category of COCO's 80 is named as COCO's map says (`COCO_WORD_LABELS`: its name and synonyms, "men" -> person,
  "puppy" -> dog; "orange" alone left out, being mostly the colour); those synonyms only for COCO's categories, and
  never over another category's own name.
- Last, the config's `labels` (`data.source.init_args.labels`: {word: category}, each word also in plural): the words
  captions use that the names do not cover ({pup: dog, stripy: stripes}), or a word moved from one category to another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caption.data.sources.coco_categories import COCO_CATEGORIES, COCO_WORD_LABELS, plural
from caption.data.sources.records import ImageRecord
from caption.errors import ConfigError
from caption.model.vocabulary import tokenize

LABELS_KEY = "data.source.init_args.labels"


def category_word_labels(categories: Sequence[str], *, labels: Mapping[str, str] | None = None,
                         where: str = "the instances files") -> dict[str, str]:
    """Caption word (or two-word phrase) -> category name, for boxes labelled by `categories` (`where`: the files
    they come from, for the message when `labels` maps a word to a category they do not have)."""
    known, coco = set(categories), set(COCO_CATEGORIES)
    words: dict[str, str] = {}
    for category in categories:
        if category not in coco:
            for form in (category.lower(), plural(category.lower())):
                words.setdefault(form, category)
    for word, category in COCO_WORD_LABELS.items():
        if category in known:
            words.setdefault(word, category)
    given: dict[str, str] = {}
    for word, category in (labels or {}).items():
        if category not in known:
            shown = ", ".join(list(categories)[:12]) + (" ..." if len(categories) > 12 else "")
            raise ConfigError(f"{LABELS_KEY} maps {word!r} to {category!r}, which is no category of {where} "
                              f"({shown}): map each word to one of those names")
        given[word.lower()] = category
    for word, category in list(given.items()):
        given.setdefault(plural(word), category)
    return words | given


def references_name_a_label(records: Sequence[ImageRecord], word_labels: Mapping[str, str], *,
                            limit: int = 2000) -> bool:
    """Whether a reference caption of the first `limit` images with boxes names a label of its boxes' data (the
    words of `word_labels`); True without boxes."""
    boxed = [record for record in records if record.objects][:limit]
    return not boxed or any(label is not None for record in boxed for reference in record.references
                            for label in named_labels(tokenize(reference), word_labels))


def named_labels(words: Sequence[str], word_labels: Mapping[str, str]) -> list[str | None]:
    """The label each word names, or None: a two-word phrase of `word_labels` ("hot dog", "teddy bear") is named
    at its last word, before that word alone ("dog", "bear"); its first word names nothing on its own."""
    named: list[str | None] = []
    for index, word in enumerate(words):
        phrase = f"{words[index - 1]} {word}" if index else None
        starts = index + 1 < len(words) and f"{word} {words[index + 1]}" in word_labels
        named.append(word_labels[phrase] if phrase in word_labels else None if starts else word_labels.get(word))
    return named
