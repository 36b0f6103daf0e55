"""How far the pure-Python PTB tokenizer's scores are from coco-caption's Java one (needs Java).

    python scripts/compare_tokenizers.py

On the built-in test split (200 images, seed 0), each image's second reference is scored as the
candidate against the other four, once as the captions are written (lowercase, no punctuation) and
once rewritten in COCO's style (capitalised, a comma, contractions, a final period). Prints the
largest difference over the metrics the tokenizer affects (METEOR runs Java either way: left out).
"""

import re
import tempfile

from caption.data.shapes import ShapesSource
from caption.metrics import PTB_JAVA, PTB_PYTHON, ptb_tokenize, python_ptb_tokenize, score_captions

SCORED = ("bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider")


def coco_style(caption: str) -> str:
    """'a red circle left of a blue square' -> 'A red circle, left of a blue square.' (and there's, isn't)."""
    caption = re.sub(r" (left of|right of|above|below) ", r", \1 ", caption).replace("there is", "there's")
    return caption[:1].upper() + caption[1:].replace(" is not ", " isn't ") + "."


def scores(candidates: dict[int, str], references: dict[int, list[str]], tokenizer: str) -> dict[str, float]:
    tokenize = (lambda captions: ptb_tokenize(captions)[0]) if tokenizer == PTB_JAVA else python_ptb_tokenize
    hypotheses = {key: value[0] for key, value in tokenize({k: [c] for k, c in candidates.items()}).items()}
    return score_captions(hypotheses, tokenize(references), metrics=SCORED)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        records = [r for r in ShapesSource(root=root, num_train=10, num_val=10, num_test=200).records()
                   if r.split == "test"]
    for name, style in (("as written", str), ("COCO style", coco_style)):
        candidates = {r.image_id: style(r.references[1]) for r in records}
        references = {r.image_id: [style(text) for i, text in enumerate(r.references) if i != 1] for r in records}
        java, python = scores(candidates, references, PTB_JAVA), scores(candidates, references, PTB_PYTHON)
        gap = max(abs(java[metric] - python[metric]) for metric in SCORED)
        print(f"{name}: {len(records)} images, Java {java}, Python {python}, largest difference {gap:.2e}")


if __name__ == "__main__":
    main()
