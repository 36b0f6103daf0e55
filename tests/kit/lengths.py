"""Caption lengths spread like COCO's, for the sampler's tests and the speed benchmark, without the data."""

import numpy as np


def coco_like_words(count: int, seed: int = 0) -> np.ndarray:
    """Words per caption: 8 + Poisson(3) (mean 11), and 1% from 15 to 30 words."""
    rng = np.random.default_rng(seed)
    words = 8 + rng.poisson(3.0, size=count)
    tail = rng.random(count) < 0.01
    words[tail] = rng.integers(15, 31, size=tail.sum())
    return words
