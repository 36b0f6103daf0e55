"""Simulated groups of runs for the paired test, where the true difference is known: the benchmark's own
(benchmarks/paired_coverage.py), so that the test and the benchmark share one definition."""

from kit.benchmark_files import benchmark_module

_benchmark = benchmark_module("paired_coverage")
REGIMES = _benchmark.REGIMES
SHIFTS = _benchmark.SHIFTS
simulated_groups = _benchmark.simulated_groups
coverage = _benchmark.coverage
