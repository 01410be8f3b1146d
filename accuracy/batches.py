"""`opbench run` in batches: one asv run per module of the suite, each saved when it ends.

asv writes a run's results file only when the whole run is over, so a Ctrl-C loses all of it.
Run once per benchmark module instead, and every finished module is kept: asv merges a run on
the same commit and environment into the results file already there (`Results.load_data`
before `Results.save`, asv 0.6.6), and the merged file is moved into the results directory
before the next module starts. Each batch gets a private copy of the benchmark directory that
holds its module and the suite's helpers only, so asv imports that module and not the whole
suite once more for every batch.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Batch:
    module: str  # top-level module (or package) of the benchmark directory
    classes: tuple[str, ...]  # what of it is selected: benchmark classes, or free functions


def plan_batches(private_config: Path, bench: str | None) -> list[Batch]:
    """Batches from the benchmarks.json that asv's discovery wrote, selected as `asv run --bench` selects."""
    from asv.benchmarks import Benchmarks
    from asv.config import Config

    selected = Benchmarks.load(Config.load(str(private_config)), regex=bench).keys()
    by_module: dict[str, set[str]] = {}
    for name in selected:
        owner = name.rsplit(".", 1)[0]
        by_module.setdefault(name.split(".", 1)[0], set()).add(owner)
    return [Batch(module, tuple(sorted(owners))) for module, owners in sorted(by_module.items())]


def batch_benchmark_dir(source: Path, batch: Batch, benchmark_modules: set[str], parent: Path) -> Path:
    """A copy of `source` without the other batches' modules, under the same name (asv imports
    the benchmark directory as a package named after it)."""
    others = benchmark_modules - {batch.module}

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
        inner = [owner.split(".", 1)[1] for owner in batch.classes if "." in owner]
        parts.append(f"{batch.module} ({', '.join(inner)})" if inner else batch.module)
    return ", ".join(parts)
