"""`opbench run` in batches of whole modules of the suite, each saved when it ends.

asv writes a run's results file only when the whole run is over, so a Ctrl-C loses all of it.
Run a few times over parts of the suite instead, and every finished part is kept: asv merges a
run on the same commit and environment into the results file already there
(`Results.load_data` before `Results.save`, asv 0.6.6), and the merged file is moved into the
results directory before the next batch starts. Each batch gets a private copy of the benchmark
directory that holds its modules and the suite's helpers only, so asv imports those modules and
not the whole suite once more for every batch.

Each batch costs one asv start-up per pass (discovery, and the measure pass's forkserver
preloading the frameworks), so a profile names how many batches it takes (`Profile.batches`):
one per module made `make bench` spend 3 of its 10 minutes starting asv (12 modules), and the
default run took 234 s in four batches and 179 s in two (2026-11-27, docs/asv-suite.md).
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Batch:
    modules: tuple[str, ...]  # top-level modules (or packages) of the benchmark directory
    classes: tuple[str, ...]  # what of them is selected: benchmark classes, or free functions
    # the backends the selected benchmarks run, for the measure pass's forkserver to preload
    # (suite_passes.PRELOAD_VAR); None: every backend of the batch's modules (no --bench)
    backends: frozenset[str] | None = None


def plan_batches(private_config: Path, bench: str | None, count: int) -> list[Batch]:
    """At most `count` batches, from the benchmarks.json that asv's discovery wrote, selected as
    `asv run --bench` selects."""
    from asv.benchmarks import Benchmarks
    from asv.config import Config

    selected = Benchmarks.load(Config.load(str(private_config)), regex=bench)
    by_module: dict[str, set[str]] = {}
    backends: dict[str, set[str]] = {}  # per class: what its selected benchmarks run
    for name, benchmark in selected.items():
        owner = name.rsplit(".", 1)[0]
        by_module.setdefault(name.split(".", 1)[0], set()).add(owner)
        backends.setdefault(owner, set()).update(_backends(benchmark))
    batches = group_modules(by_module, count)
    if bench is None:
        return batches
    return [replace(b, backends=frozenset().union(*(backends[owner] for owner in b.classes))) for b in batches]


def _backends(benchmark: dict) -> set[str]:
    """The backends of a generated benchmark's cases (`'numpy:np.dot@float32'`, asv's repr of
    the `impl_dtype` parameter); none for a hand-written one."""
    if benchmark.get("param_names", [])[:1] != ["impl_dtype"]:
        return set()
    return {ast.literal_eval(case).split(":", 1)[0] for case in benchmark["params"][0]}


def group_modules(by_module: dict[str, set[str]], count: int) -> list[Batch]:
    """Whole modules in name order; a batch closes once it holds 1/count of the classes."""
    share = sum(map(len, by_module.values())) / count
    batches: list[Batch] = []
    modules: list[str] = []
    classes: list[str] = []
    for module, owners in sorted(by_module.items()):
        modules.append(module)
        classes += sorted(owners)
        if len(classes) >= share:
            batches.append(Batch(tuple(modules), tuple(classes)))
            modules, classes = [], []
    if modules:
        batches.append(Batch(tuple(modules), tuple(classes)))
    return batches


def batch_benchmark_dir(source: Path, batch: Batch, benchmark_modules: set[str], parent: Path) -> Path:
    """A copy of `source` without the other batches' modules, under the same name (asv imports
    the benchmark directory as a package named after it)."""
    others = benchmark_modules - set(batch.modules)

    def skipped(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == source
        return {n for n in names if n == "__pycache__" or (top and n.removesuffix(".py") in others)}

    target = parent / source.name
    shutil.copytree(source, target, ignore=skipped)
    return target


def describe(batches: list[Batch]) -> str:
    """`bench_products (Dot, Gemv), bench_reductions (Sum)`: what a list of batches covers."""
    parts = []
    for batch in batches:
        for module in batch.modules:
            inner = [owner.split(".", 1)[1] for owner in batch.classes if owner.startswith(f"{module}.")]
            parts.append(f"{module} ({', '.join(inner)})" if inner else module)
    return ", ".join(parts)
