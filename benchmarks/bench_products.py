"""asv benchmarks for the 'products' ops, generated from the op registry (see common.py)."""

from .common import benchmark_classes

globals().update(benchmark_classes("products"))
