"""A small, realistic asv results directory with known regressions, for the report tests.

Six commits, two environments on one machine. Every series carries measurement noise that must
NOT be reported; exactly three regressions are injected (see INJECTED). Results are written
through asv's own Results class, so the files are what `asv run` would leave behind.
"""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import numpy as np

from accuracy.report.synthetic import (
    SyntheticBenchmark,
    write_benchmarks,
    write_machine,
    write_result_file,
)

MACHINE = "bench-box"
OPENBLAS, MKL = "py3.11-openblas", "py3.11-mkl"
ENVS = (OPENBLAS, MKL)
N_COMMITS = 6
COMMITS = [hashlib.sha1(f"commit {i}".encode()).hexdigest() for i in range(N_COMMITS)]
DATES = [datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(days=i) for i in range(N_COMMITS)]

PARAM_NAMES = ("impl", "dtype", "size", "threads")
PARAMS = (("torch:F.linear", "numpy:matmul"), ("float32", "float64"), (64, 256), (1,))
BENCHMARKS = [
    SyntheticBenchmark("linear.Linear.time_linear", "time", "seconds", PARAM_NAMES, PARAMS),
    SyntheticBenchmark("linear.Linear.track_max_ulp", "track", "ulp", PARAM_NAMES, PARAMS),
    SyntheticBenchmark("linear.Linear.track_bound_ratio", "track", "ratio", PARAM_NAMES, PARAMS),
    SyntheticBenchmark("linear.Linear.track_nonfinite", "track", "count", PARAM_NAMES, PARAMS),
]

# (benchmark, env, params combo, first commit index at the new level, factor)
TIME_STEP = ("linear.Linear.time_linear", OPENBLAS, ("torch:F.linear", "float32", 256, 1), 3, 1.5)
ULP_STEP = ("linear.Linear.track_max_ulp", MKL, ("numpy:matmul", "float32", 64, 1), 2, 7 / 3)
SLOWDOWN = ("linear.Linear.time_linear", OPENBLAS, ("numpy:matmul", "float64", 256, 1), 4, 1 / 0.6)
INJECTED = (TIME_STEP, ULP_STEP, SLOWDOWN)
GFLOPS = "linear.Linear.gflops"  # derived from time_linear's samples by the loader
# A failed measurement (asv stores None): a row with failed=True, never a step.
FAILED = ("linear.Linear.time_linear", MKL, ("numpy:matmul", "float64", 64, 1), 1)

FINGERPRINTS = {
    OPENBLAS: {
        "blas": [{"internal_api": "openblas", "version": "0.3.31", "architecture": "Haswell", "num_threads": 8}],
        "torch": "2.13.0",
        "numpy": {"version": "2.4.6"},
    },
    MKL: {
        "blas": [{"internal_api": "mkl", "version": "2025.2", "architecture": None, "num_threads": 8}],
        "torch": "2.13.0",
        "numpy": {"version": "2.4.6"},
    },
}


def _measure(rng: np.random.Generator, env: str, commit: int):
    """Noise of a few percent on every value, plus the injected steps."""
    drift = {(b.name, c): rng.uniform(0.97, 1.03) for b in BENCHMARKS for c in b.combinations()}

    def measure(bench: SyntheticBenchmark, combo: tuple):
        impl, dtype, size, _ = combo
        factor = 1.0
        for name, step_env, step_combo, first, step in INJECTED:
            if (name, step_env, step_combo) == (bench.name, env, combo) and commit >= first:
                factor = step
        if (bench.name, env, combo, commit) == FAILED:
            return None
        seconds = 1e-9 * size**2 * (2 if dtype == "float64" else 1) * (1.3 if impl == "numpy:matmul" else 1)
        if bench.kind == "time":
            level = seconds * drift[bench.name, combo] * factor
            return list(level * (1 + 0.005 * rng.standard_normal(10)))
        if bench.unit == "ulp":
            return (3.0 if dtype == "float32" else 1.0) * factor
        return {"ratio": 0.25, "count": 0.0}[bench.unit] * factor

    return measure


def make_results_dir(root: Path, seed: int = 0) -> Path:
    """Write the fixture under root/results and return that directory."""
    results = Path(root) / "results"
    rng = np.random.default_rng(seed)
    write_machine(results, MACHINE)
    write_benchmarks(results, BENCHMARKS)
    for env in ENVS:
        for i, (commit, date) in enumerate(zip(COMMITS, DATES, strict=False)):
            write_result_file(results, MACHINE, env, commit, date, BENCHMARKS, _measure(rng, env, i), FINGERPRINTS[env])
    return results


def make_one_result_dir(root: Path) -> Path:
    """A results directory of one benchmark at one commit, under root/results: for the claims about
    where and how a report is written, which do not depend on what it holds (a report of the
    fixture above draws ~4 CPU-s of plots)."""
    benchmark = SyntheticBenchmark("linear.Linear.track_max_ulp", "track", "ulp", ("impl",), (("numpy:matmul",),))
    results = Path(root) / "results"
    write_machine(results, MACHINE)
    write_benchmarks(results, [benchmark])
    write_result_file(results, MACHINE, OPENBLAS, COMMITS[0], DATES[0], [benchmark], lambda bench, combo: 1.0)
    return results


def params_label(combo: tuple) -> str:
    return ", ".join(f"{name}={value}" for name, value in zip(PARAM_NAMES, combo, strict=False))
