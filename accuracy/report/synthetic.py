"""Write asv-format results directories from made-up measurements.

The report tests and the loading benchmark need results that asv itself would write, so this
goes through asv's own `Results.add_result`/`save` (which also computes the timing confidence
intervals from samples) rather than imitating the file format.
"""

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from asv import util
from asv.benchmarks import Benchmarks
from asv.machine import Machine
from asv.results import Results
from asv.runner import BenchmarkResult

# A measurement of one parameter combination: timing samples (seconds, asv derives the value
# and its confidence interval), a tracked number, or None for a failed benchmark.
Measurement = Sequence[float] | float | None


@dataclass(frozen=True)
class SyntheticBenchmark:
    """One asv benchmark as benchmarks.json describes it; params are python literals."""

    name: str
    kind: str  # "time" or "track"
    unit: str
    param_names: tuple[str, ...]
    params: tuple[tuple[object, ...], ...]
    version: str = "1"

    @property
    def param_reprs(self) -> list[list[str]]:
        """Parameters the way asv stores them: the repr of each value."""
        return [[repr(value) for value in values] for values in self.params]

    def combinations(self) -> list[tuple[object, ...]]:
        return list(itertools.product(*self.params))

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "type": self.kind,
            "unit": self.unit,
            "param_names": list(self.param_names),
            "params": self.param_reprs,
            "version": self.version,
            "timeout": 60.0,
        }


def write_machine(results_dir: Path, machine: str) -> None:
    util.write_json(
        str(Path(results_dir) / machine / "machine.json"),
        {"machine": machine, "arch": "x86_64", "cpu": "synthetic", "num_cpu": "16", "os": "Linux"},
        api_version=Machine.api_version,
    )


def write_benchmarks(results_dir: Path, benchmarks: Sequence[SyntheticBenchmark]) -> None:
    util.write_json(
        str(Path(results_dir) / "benchmarks.json"),
        {bench.name: bench.to_json() for bench in benchmarks},
        api_version=Benchmarks.api_version,
    )


def write_result_file(
    results_dir: Path,
    machine: str,
    env_name: str,
    commit_hash: str,
    commit_date: datetime.datetime,
    benchmarks: Sequence[SyntheticBenchmark],
    measure: Callable[[SyntheticBenchmark, tuple[object, ...]], Measurement],
    fingerprint: dict | None = None,
) -> Path:
    """Save one asv results file (plus opbench's `.fingerprint` beside it); return its path."""
    results = Results(
        {"machine": machine, "python": "3.11"},
        {},
        commit_hash,
        util.datetime_to_js_timestamp(commit_date),
        "3.11",
        env_name,
        {},
    )
    _add(results, benchmarks, measure, commit_date, append=False)
    results.save(str(results_dir))
    path = Path(results_dir) / machine / f"{commit_hash[:8]}-{env_name}.json"
    if fingerprint is not None:
        path.with_suffix(".fingerprint").write_text(json.dumps(fingerprint))
    return path


def append_samples(
    results_dir: Path,
    path: Path,
    benchmarks: Sequence[SyntheticBenchmark],
    measure: Callable[[SyntheticBenchmark, tuple[object, ...]], Measurement],
) -> None:
    """Add a second run's measurements to a saved results file, as `asv run --append-samples`
    does: its timing samples beside the first ones, its tracked values in their place."""
    results = Results.load(str(path))
    _add(results, benchmarks, measure, datetime.datetime.now(datetime.UTC), append=True)
    results.save(str(results_dir))


def _add(results: Results, benchmarks, measure, started_at: datetime.datetime, append: bool) -> None:
    for bench in benchmarks:
        measurements = [measure(bench, combo) for combo in bench.combinations()]
        timed = [isinstance(m, Sequence) for m in measurements]
        outcome = BenchmarkResult(
            result=[_point_value(m) for m in measurements],
            samples=[list(m) if isinstance(m, Sequence) else None for m in measurements],
            number=[1 if t else None for t in timed],
            errcode=0,
            stderr="",
            profile=None,
        )
        spec = bench.to_json() | {"params": bench.param_reprs}
        results.add_result(
            spec, outcome, started_at=started_at, duration=1.0, record_samples=True, append_samples=append
        )


def _point_value(measurement: Measurement) -> float | None:
    """asv recomputes timing values from samples; it keeps track values as given."""
    if measurement is None or isinstance(measurement, Sequence):
        return 0.0 if measurement else None
    return float(measurement)
