"""asv benchmarks for the 'norms' ops, generated from the op registry (see common.py)."""

from .common import benchmark_classes

globals().update(benchmark_classes("norms"))
