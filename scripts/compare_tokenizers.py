"""How far the pure-Python PTB tokenizer's scores are from coco-caption's Java one (needs Java).

    python scripts/compare_tokenizers.py

On the built-in test split (200 images, seed 0), each image's second reference is scored as the
candidate against the other four, once as the captions are written (lowercase, no punctuation) and
once rewritten in COCO's style (capitalised, a comma, contractions, a final period). Prints the
largest difference over the metrics the tokenizer affects (METEOR runs Java either way: left out).
Then counts the captions both tokenizers split identically among 3,000 random ones built from
fragments that are hard for a PTB tokenizer (abbreviations, contractions, numbers, brackets, quotes).
"""

import random
import re
import tempfile

from caption.data.synthetic.shapes import ShapesSource
from caption.evaluation.metrics import score_captions
from caption.evaluation.ptb_tokenizer import PTB_JAVA, PTB_PYTHON, ptb_tokenize, python_ptb_tokenize

SCORED = ("bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider")
FRAGMENTS = (
    "a man dog The U.S. Mr. St. p.m. 3.5 1,000 5:30 $5 50% #1 black-and-white and/or e-mail C++ @home there's don't "
    "can't won't I'm we'll they've he'd you're dogs' cannot gonna isn't it's Smith's café naïve (in hat) [sic] {x} "
    "\"hi\" 'single' `quoted' -- - ... & / x-ray 3d 2nd o'clock rock'n'roll A. e.g. etc. i.e. T-shirt co-op 5' 6\" "
    "10x # @ * + = < > ~ ^ | \\"
).split()


def hard_captions(count: int, seed: int = 0) -> list[str]:
    """`count` random captions of 3-12 fragments, some capitalised or followed by punctuation."""
    rng = random.Random(seed)
    captions = []
    for _ in range(count):
        words = [rng.choice(FRAGMENTS) for _ in range(rng.randint(3, 12))]
        words = [(w.capitalize() if rng.random() < 0.2 else w) + (rng.choice(",.!?;:") if rng.random() < 0.2 else "")
                 for w in words]
        captions.append(" ".join(words) + rng.choice(["", ".", " .", "!"]))
    return captions


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
    captions = {key: [caption] for key, caption in enumerate(hard_captions(3000))}
    java, _ = ptb_tokenize(captions)
    same = sum(java[key] == value for key, value in python_ptb_tokenize(captions).items())
    print(f"hard captions: {same} of {len(captions)} tokenised identically")


if __name__ == "__main__":
    main()
