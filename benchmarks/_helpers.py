"""What several benchmarks share (a helper, not a script): COCO-like caption lengths, and the overrides that shrink a
`caption fit` of the shapes configs for a smoke run. tests/kit/lengths.py reads the lengths from here; benchmarks
never import from tests/."""

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
