"""asv benchmarks for ops that installed packages declare under the `opbench.ops` entry points."""

from accuracy.catalog.registry import OP_MODULES, families

from .common import benchmark_classes

for _family in families():
    if _family not in OP_MODULES:
        globals().update(benchmark_classes(_family))
