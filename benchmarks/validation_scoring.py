"""What scoring one validation epoch costs on the one evaluation path (`caption.evaluation.scoring`): PTB tokenisation
runs Java.

    python benchmarks/validation_scoring.py                  # 50 images x 5 references, 5 repeats, median
    python benchmarks/validation_scoring.py --images 200 --repeats 3

Times the val/bleu4 + val/cider scoring of IMAGES captions (what `on_validation_epoch_end` computes), four ways:
before the one path (references in the project's own tokens, no Java), the first epoch (references and candidates
through coco-caption's PTB tokenizer, one Java call), a later epoch with new candidates (the references' tokens
come from the `PTBCache`: one Java call for the candidates only) and a later epoch repeating earlier captions (no
Java call). Prints a Markdown table.
"""

import argparse
import platform
import statistics
import time
from datetime import date

from caption.evaluation.metrics import coco_scores, score_captions
from caption.evaluation.ptb_tokenizer import PTBCache
from caption.model.vocabulary import tokenize

WORDS = "a man 's dog is running on the green grass near two red cars and a small white house".split()


def captions(images: int, epoch: int) -> dict[int, str]:
    """Each epoch's captions differ from every earlier epoch's (one more word)."""
    return {i: " ".join(WORDS[(i + k) % len(WORDS)] for k in range(6 + epoch)) for i in range(images)}


def references(images: int) -> dict[int, list[str]]:
    return {i: [f"A Man's dog (number {i}), running on the {WORDS[(i + j) % len(WORDS)]} grass." for j in range(5)]
            for i in range(images)}


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    refs, metrics = references(args.images), ("bleu4", "cider")
    own = {i: [" ".join(tokenize(text)) for text in texts] for i, texts in refs.items()}
    rows = {"before: own tokens, no Java": [], "first epoch: references + candidates (1 Java call)": [],
            "later epoch, new candidates (1 Java call)": [], "later epoch, captions seen before (no Java)": []}
    for repeat in range(args.repeats):
        cache = PTBCache()
        rows["before: own tokens, no Java"].append(timed(lambda: score_captions(captions(args.images, 0), own,
                                                                                metrics=metrics)))
        for name, epoch in zip(list(rows)[1:], (0, 1, 1)):
            rows[name].append(timed(lambda: coco_scores(captions(args.images, epoch), refs, metrics=metrics,
                                                        cache=cache)))
    print(f"{args.images} images x 5 references, median of {args.repeats}; {date.today().isoformat()}, "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| scoring of one validation | seconds |\n|---|---:|")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
