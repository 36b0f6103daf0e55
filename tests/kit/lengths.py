"""Caption lengths spread like COCO's, for the sampler's tests, and COCO-like captions of word ids, for the reward's:
the benchmarks' own (benchmarks/_helpers.py), read from its file (benchmarks/ is no package and not on sys.path), so
that tests and benchmarks share one definition."""

from kit.benchmark_files import benchmark_module

_helpers = benchmark_module("_helpers")
coco_like_words = _helpers.coco_like_words
coco_like_references = _helpers.coco_like_references
perturbed = _helpers.perturbed
