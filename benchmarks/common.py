"""Shared machinery of the asv suite: every benchmark class is generated from the op registry.

One class per op, one `time_op` and paired `track_*` methods over the same parameters:
implementation@dtype, size, condition (only for ops with several input regimes) and threads.
Only valid combinations are enumerated: the first parameter lists the (implementation, dtype)
pairs that exist on this machine, so nothing is padded with skips. OPBENCH_PROFILE (quick,
default, full) picks how lean the grid is.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accuracy.backends import get_backend
from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import ALL_DTYPES, get_format
from accuracy.core.threads import all_cores
from accuracy.judge.metric_table import Metric, benchmark_class_name, tracks
from accuracy.reference.inputs import DEFAULT_CONDITION
from accuracy.workflows.evaluation import Case

RUN_DIR_VAR = "OPBENCH_RUN_DIR"  # set by `opbench run`: per-run scratch shared by benchmark processes
RUNS = 3  # runs per case: outputs that differ among them make the case not reproducible
SUITE_VERSION = 1  # bump when the meaning of a benchmark changes; code edits alone keep history
# asv's discovery (`benchmark.py discover ...`) only lists the classes: preloading the frameworks
# there is wasted (~9 CPU-s with TensorFlow), and `opbench run` discovers once per batch
DISCOVERING = sys.argv[1:2] == ["discover"]


@dataclass(frozen=True)
class Profile:
    dtypes: tuple[str, ...]
    sizes: int  # how many of each op's bench_sizes to use
    threads: tuple[int, ...]
    # torch.compile costs ~3.5 s per benchmark process even with inductor's disk cache,
    # so only the full profile times it (explain always shows it)
    skip_backends: tuple[str, ...] = ("torch-compile",)
    # backends timed only in their first implementation of each op (their variants are in the full
    # profile; explain always shows them)
    lean_backends: tuple[str, ...] = ()


BOTH_THREAD_COUNTS = tuple(sorted({1, all_cores()}))
# the frameworks add ~90 parameter combinations to the default run even when lean (docs/frameworks.md: suite time)
FRAMEWORKS = ("tensorflow", "onnxruntime", "libtorch", "jax")
LEAN = {"skip_backends": ("torch-compile", "onnxruntime-noopt"), "lean_backends": FRAMEWORKS}
# quick and default run at all cores only: every benchmark is its own process, and a 1-thread column
# would double them (docs/frameworks.md: suite time). The 1-thread result is still run and judged there (see
# `_measure_now`); its timing is in the full profile.
PROFILES = {
    "quick": Profile(("float32",), 1, (all_cores(),), **LEAN),
    "default": Profile(("float32",), 1, (all_cores(),), **LEAN),
    "full": Profile(ALL_DTYPES, 2, BOTH_THREAD_COUNTS, skip_backends=()),
}


def current_profile() -> Profile:
    name = os.environ.get("OPBENCH_PROFILE", "default")
    if name not in PROFILES:
        raise ValueError(f"OPBENCH_PROFILE={name!r}; choose from {', '.join(PROFILES)}")
    return PROFILES[name]


def output_digest(output: np.ndarray) -> int:
    """The first 52 bits of the SHA-256 of the output's dtype, shape and bytes: an integer a float64
    asv track holds exactly, equal for equal bits (a chance collision is 1 in 2**52)."""
    digest = hashlib.sha256(f"{output.dtype.str}{output.shape}".encode() + output.tobytes()).digest()
    return int.from_bytes(digest[:7], "big") >> 4


class _OpBenchmark:
    """Times one implementation of an op and records its error on exactly the same inputs."""

    op_name: str = ""
    timeout = 600
    # lean timing: 2 to 8 short samples (at most 1 s) per parameter combination keeps the suite in
    # budget; 6 or more per side let `opbench compare` apply asv's Mann-Whitney test (p < 0.002)
    repeat = (2, 8, 1.0)
    rounds = 1
    number = 0
    min_run_count = 1
    warmup_time = 0.02
    sample_time = 0.02

    def setup(self, *params):
        p = dict(zip(self.param_names, params, strict=False))
        impl_name, dtype = p["impl_dtype"].rsplit("@", 1)
        op = get_op(self.op_name)
        self.case = Case(op, get_format(dtype), p["size"], p.get("condition", DEFAULT_CONDITION))
        self.impl = op.impl(impl_name)
        self.backend = get_backend(self.impl.backend)
        self.native = {k: self.backend.to_native(v) for k, v in self.case.inputs.items()}
        self.threads = p["threads"]
        self._threads = self.backend.thread_limit(self.threads)
        self._threads.__enter__()

    def teardown(self, *params):
        self._threads.__exit__(None, None, None)

    def _call(self):
        self.backend.call(self.impl.fn, self.native)
        self.backend.synchronize()

    def time_op(self, *params):
        self._call()

    def _measured(self) -> dict:
        """The error summary and the verdict, measured once per run and shared by the value tracks.

        asv runs each track in its own process; `opbench run` gives them a scratch folder
        (OPBENCH_RUN_DIR) so the op, the references, the bound and the typical tier are evaluated
        once per parameter combination. Outside such a run every track measures for itself.
        """
        run_dir = os.environ.get(RUN_DIR_VAR)
        if not run_dir:
            return self._measure_now()
        case = self.case
        # one scratch folder serves every environment and commit of a matrix or history run
        where = "|".join(os.environ.get(v, "") for v in ("ASV_ENV_NAME", "ASV_COMMIT")) + f"|{sys.prefix}"
        key = f"{where}|{self.op_name}|{self.impl.name}|{case.fmt.name}|{case.size}|{case.condition}|{self.threads}"
        path = Path(run_dir) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
        if path.exists():
            return json.loads(path.read_text())
        measured = self._measure_now()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(measured))
        tmp.replace(path)  # atomic: a concurrent reader sees all or nothing
        return measured

    def _measure_now(self) -> dict:
        """Run the implementation RUNS times: if the outputs differ, the case is not reproducible
        and its accuracy tracks report the worst run; the digest is of the first run's bits.
        One more run at the other end of the thread range (1 thread, or all cores from the 1-thread
        column) says whether the bits change with threads; at all cores a 1-thread result with other
        bits is judged too, and the tracks report the worse."""
        outputs = [self.case.run(self.impl) for _ in range(RUNS)]
        differs = any(out.tobytes() != outputs[0].tobytes() for out in outputs[1:])
        other_threads = self.case.run(self.impl, all_cores() if self.threads == 1 else 1)
        threads_differ = other_threads.tobytes() != outputs[0].tobytes()
        judged = outputs if differs else outputs[:1]
        if threads_differ and self.threads != 1:
            judged = [*judged, other_threads]
        measured = [self._judged(out) for out in judged]
        worst = max(
            measured,
            key=lambda m: (
                m["verdict_tier"],
                -math.inf if math.isnan(m["bound_ratio"]) else m["bound_ratio"],
                m["max_ulp"],
            ),
        )
        return {
            **worst,
            "output_digest": output_digest(outputs[0]),
            "bits_differ_run_to_run": int(differs),
            "bits_differ_1_vs_all_threads": int(threads_differ),
        }

    def _judged(self, result) -> dict:
        judgement = self.case.judge(self.impl, result)
        return {
            **self.case.measure(self.impl, result).as_dict(),
            "verdict_tier": judgement.tier,
            "typical_ratio": judgement.typical_ratio,
        }


def _track_method(metric: Metric):
    """An asv track for one metric-table entry: its field of the shared measurement."""

    def track(self, *params):
        return self._measured()[metric.field]

    track.__name__ = metric.track
    track.__doc__ = metric.doc
    track.unit = metric.unit  # asv reads the unit from the function attribute
    return track


for _metric in tracks():
    setattr(_OpBenchmark, _metric.track, _track_method(_metric))


def _cases(op, profile: Profile) -> list[str]:
    cases = []
    for dtype in profile.dtypes:
        seen = set()
        for impl in op.available_impls(dtype):
            if impl.backend in profile.skip_backends or (
                impl.backend in profile.lean_backends and impl.backend in seen
            ):
                continue
            seen.add(impl.backend)
            cases.append(f"{impl.name}@{dtype}")
    return cases


def benchmark_classes(family: str) -> dict[str, type]:
    """One benchmark class per op of `family`, named like the op (`Linear`, `LogSoftmax`)."""
    profile = current_profile()
    classes = {}
    for op in all_ops():
        cases = _cases(op, profile)
        if op.family != family or not cases:
            continue
        for backend in set() if DISCOVERING else {case.split(":")[0] for case in cases}:
            get_backend(backend).preload()  # runs in asv's forkserver: paid once, not per process
        name = benchmark_class_name(op.name)
        conditions = op.condition_names()
        grid = {"impl_dtype": cases, "size": list(op.bench_sizes[: profile.sizes])}
        if len(conditions) > 1:
            grid["condition"] = list(conditions)
        grid["threads"] = list(profile.threads)
        classes[name] = type(
            name,
            (_OpBenchmark,),
            {
                "op_name": op.name,
                "param_names": list(grid),
                "params": list(grid.values()),
                "version": f"{op.name}-op{op.version}-suite{SUITE_VERSION}",
            },
        )
    # asv's forkserver forks every benchmark process from here: frozen objects are skipped by the
    # children's garbage collector, so it does not touch (and copy) the preloaded frameworks' pages
    # (measured: 0.39 s per forked process with TensorFlow, JAX and ONNX Runtime loaded, 0.001 s frozen)
    gc.freeze()
    return classes
