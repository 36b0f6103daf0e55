"""Caption lengths spread like COCO's, for the sampler's tests, and COCO-like captions of word ids, for the reward's:
the benchmarks' own (benchmarks/_helpers.py), read from its file (benchmarks/ is no package and not on sys.path), so
that tests and benchmarks share one definition."""

import importlib.util
from pathlib import Path

_HELPERS = Path(__file__).resolve().parents[2] / "benchmarks" / "_helpers.py"
_spec = importlib.util.spec_from_file_location("benchmarks_helpers", _HELPERS)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)

coco_like_words = _helpers.coco_like_words
coco_like_references = _helpers.coco_like_references
perturbed = _helpers.perturbed
