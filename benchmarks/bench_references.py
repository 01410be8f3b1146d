"""asv: the speed of the exact references against the op they check (same process, same run),
and, in the `full` profile, whole-domain scans' worst errors per function and implementation.

Goals (issue #15): exact float64 GEMM at n = 512 within 20x dgemm and n = 1024 within 3 s;
correctly rounded float64 exp >= 1 M elements/s (1e6 in <= 2 s); float32 >= 100 M elements/s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

import numpy as np

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.run.profiles import FULL, QUICK, current_profile
from accuracy.workflows.scan import SCAN_TRACKS, as_rows, scan, scan_class_name, scannable, select_impls

from .common import hide_outside_measure_pass, ready_to_fork, scratch_folder, shared

SCANNED = ("exp", "log", "tanh", "sin")  # float32 whole-domain scans of the full profile


def _unit(unit: str):
    """An asv track's unit (asv reads the function attribute). Every track here is lower-is-better."""

    def wrap(fn):
        fn.unit = unit
        return fn

    return wrap


def _seconds(fn, clock=time.perf_counter) -> float:
    start = clock()
    fn()
    return clock() - start


class ExactGemm:
    """Ozaki exact product vs numpy's dgemm on the same n x n float64 matrices."""

    params: ClassVar = [[512, 1024]]
    param_names: ClassVar = ["n"]
    timeout = 600
    number, repeat, rounds, min_run_count, warmup_time = 1, 1, 1, 1, 0.0

    def setup(self, n):
        rng = np.random.Generator(np.random.PCG64(n))
        self.a, self.b = rng.standard_normal((n, n)), rng.standard_normal((n, n))

    def time_dgemm(self, n):
        self.a @ self.b

    def time_exact_gemm(self, n):
        exact_matmul(self.a, self.b)

    @_unit("x dgemm")
    def track_exact_over_dgemm(self, n):
        """The exact product's time over dgemm's (best of 3), measured back to back."""
        dgemm = min(_seconds(lambda: self.a @ self.b) for _ in range(3))
        return _seconds(lambda: exact_matmul(self.a, self.b)) / dgemm


class CorrectlyRounded:
    """Correctly rounded elementwise references vs numpy's own function, on the op's own inputs.
    Wall time uses every core (the narrow path runs chunks in threads)."""

    params: ClassVar = [["exp", "log", "tanh", "sin"], ["float32", "float64"]]
    param_names: ClassVar = ["func", "dtype"]
    timeout = 600
    number, repeat, rounds, min_run_count, warmup_time = 1, 1, 1, 1, 0.0
    SIZES: ClassVar = {"float64": 1_000_000, "float32": 1 << 24}

    def setup(self, func, dtype):
        if dtype == "float64" and func != "exp":
            raise NotImplementedError("float64: exp is the goal's measure; the others cost minutes")
        self.op, self.fmt = get_op(func), get_format(dtype)
        x = self.op.generate(np.random.Generator(np.random.PCG64(1)), self.SIZES[dtype])["x"]
        self.x = self.fmt.round(x)
        self.inputs64 = {"x": self.x.astype(np.float64)}
        self.numpy_fn = getattr(np, func)
        # one-time costs out of the timing (asv times one call): torch's import, and the kernel's
        # first huge-page faults on the output (up to +100 ms per 128 MB here, then +6 ms)
        self._reference()

    def _reference(self):
        self.op.exact(self.inputs64, self.fmt)

    def time_reference(self, func, dtype):
        self._reference()

    def time_op(self, func, dtype):
        self.numpy_fn(self.x)

    @_unit("s per M elements")
    def track_reference_seconds_per_million(self, func, dtype):
        """Wall time on every core, best of 3.
        Goals: float64 exp <= 1 s (>= 1 M/s), float32 <= 0.01 s (>= 100 M/s)."""
        return min(_seconds(self._reference) for _ in range(3)) / self.x.size * 1e6

    @_unit("CPU-s per M elements")
    def track_reference_cpu_seconds_per_million(self, func, dtype):
        """The CPU time of every thread, best of 3: what a loaded machine still measures fairly."""
        return min(_seconds(self._reference, time.process_time) for _ in range(3)) / self.x.size * 1e6

    @_unit("x op")
    def track_reference_over_op(self, func, dtype):
        op = min(_seconds(lambda: self.numpy_fn(self.x)) for _ in range(3))
        return _seconds(self._reference) / op


_SCAN_TRACK_DOCS = {  # row key -> (unit, doc); all lower is better
    "max_ulp": ("ulp", "Largest ulp error over every input of the format."),
    "not_correctly_rounded": ("count", "Inputs whose result is not the correctly rounded value."),
}


def _scan_rows(name: str, dtype: str) -> dict:
    op, fmt = get_op(name), get_format(dtype)
    return {r["impl"]: r for r in as_rows(scan(op, fmt, select_impls(op, fmt, None)))}


def _scan_track(name: str, key: str, func: str, dtype: str):
    """asv track `name` reading one column of the scan's rows (`accuracy.workflows.scan.as_rows`) for
    an impl. The first track process of the class scans; the others read its rows from the run's
    scratch folder. (A `setup_cache` per class cannot: asv keys setup_cache by its source line, so
    classes made in a loop share one, and every class got the first class's rows.)"""

    def track(self, scratch, impl):
        return shared(Path(scratch), f"scan|{func}|{dtype}", lambda: _scan_rows(func, dtype))[impl][key]

    track.__name__ = track.__qualname__ = name
    track.unit, track.__doc__ = _SCAN_TRACK_DOCS[key]
    return track


def _scan_classes() -> dict[str, type]:
    """`full` profile: one class per scanned function and format; tracks per implementation."""
    if current_profile() != FULL:
        return {}
    classes = {}
    plan = [(name, "float32") for name in SCANNED]
    plan += [(op.name, dtype) for dtype in ("float16", "bfloat16") for op in map(get_op, SCANNED) if scannable(op)]
    for name, dtype in plan:
        op = get_op(name)
        impls = [i.name for i in op.available_impls(dtype)]
        if not impls:
            continue

        cls = scan_class_name(name, dtype)
        classes[cls] = type(
            cls,
            (),
            {
                "params": [impls],
                "param_names": ["impl"],
                "timeout": 3600,
                "setup_cache": scratch_folder,  # the run's scratch folder, shared with the op classes
                **{track: _scan_track(track, key, name, dtype) for track, key in SCAN_TRACKS.items()},
                "version": f"scan-{name}-{dtype}-op{op.version}",
            },
        )
    return classes


globals().update(_scan_classes())
if current_profile() == QUICK:  # the quick profile times the ops only
    del ExactGemm, CorrectlyRounded


hide_outside_measure_pass(globals())  # `opbench run`'s read pass runs the generated tracks only
ready_to_fork()
