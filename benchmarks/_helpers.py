"""What several benchmarks share (a helper, not a script): COCO-like caption lengths and captions of word ids, a
`caption` command in its own process, and the overrides that shrink a `caption fit` of the shapes configs for a smoke
run. tests/kit/lengths.py reads the lengths and captions from here; benchmarks never import from tests/."""

import platform
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import numpy as np

# `caption fit` overrides of a smoke run on the shapes configs: one epoch of a model of a few units, the encoder's
# three blocks (and so its grid) kept, no test after fit (the benchmarks score the test split themselves); the
# figures it gives mean nothing, it only shows the script runs
SMOKE_FIT = ("--trainer.max_epochs", "1", "--trainer.limit_test_batches", "0", "--model.decoder.embed_dim", "8",
             "--model.decoder.hidden_dim", "16", "--model.attention.dim", "8", "--model.encoder.channels", "[4, 8, 8]")
SMOKE_SPLITS = {"train": 8, "val": 4, "test": 4}  # images of a smoke run


def coco_like_words(count: int, seed: int = 0) -> np.ndarray:
    """Words per caption: 8 + Poisson(3) (mean 11), and 1% from 15 to 30 words.

    Args:
        count: captions.
        seed: seed of the generator.
    """
    rng = np.random.default_rng(seed)
    words = 8 + rng.poisson(3.0, size=count)
    tail = rng.random(count) < 0.01
    words[tail] = rng.integers(15, 31, size=tail.sum())
    return words


def coco_like_references(counts: list[int], *, vocabulary: int = 10_000, seed: int = 0) -> list[list[list[int]]]:
    """Reference captions of word ids 1..vocabulary (0 left for padding): counts[i] for image i, their lengths
    coco_like_words', their words drawn by Zipf's law (p ∝ 1/rank, so "a" and "on" recur as in real captions).

    Args:
        counts: references per image.
        vocabulary: distinct words.
        seed: seed of the generator.
    """
    rng = np.random.default_rng(seed)
    lengths = coco_like_words(sum(counts), seed=seed + 1)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    words = (1 + rng.choice(vocabulary, size=int(lengths.sum()), p=weights / weights.sum())).tolist()
    ends = np.cumsum(lengths).tolist()
    captions = [words[end - length:end] for end, length in zip(ends, lengths.tolist())]
    starts = np.cumsum([0, *counts]).tolist()
    return [captions[start:end] for start, end in pairwise(starts)]


def perturbed(caption: list[int], rng: np.random.Generator, *, vocabulary: int) -> list[int]:
    """A caption as a sampled one differs from a reference: each word dropped (p = 0.1), replaced by a random word of
    1..vocabulary (p = 0.2) or swapped with the next (p = 0.1)."""
    words = [w for w in caption if rng.random() >= 0.1]
    for i in range(len(words)):
        draw = rng.random()
        if draw < 0.2:
            words[i] = int(rng.integers(1, vocabulary + 1))
        elif draw < 0.3 and i + 1 < len(words):
            words[i], words[i + 1] = words[i + 1], words[i]
    return words


def cpu_name() -> str:
    """The CPU's model name (Linux), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def caption(command: list[str], log: Path) -> float:
    """One `caption` command in its own process (its output in `log`); returns its wall seconds."""
    started = time.perf_counter()
    with log.open("w") as file:
        if subprocess.run([sys.executable, "-m", "caption.cli", *command], stdout=file,
                          stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"caption {' '.join(command)} failed; see {log}")
    return time.perf_counter() - started
