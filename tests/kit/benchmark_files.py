"""A module of benchmarks/ read from its file (benchmarks/ is no package and not on sys.path), so that the tests and
the benchmarks share one definition of what both use."""

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """benchmarks/<name>.py, loaded as the module benchmarks_<name>."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
