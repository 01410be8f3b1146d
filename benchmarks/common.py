"""Shared machinery of the asv suite: every benchmark class is generated from the op registry.

One class per op, one `time_op` and paired `track_*` methods over the same parameters:
implementation@dtype, size, condition (only for ops with several input regimes) and threads.
Only valid combinations are enumerated: the first parameter lists the (implementation, dtype)
pairs that exist on this machine, so nothing is padded with skips. OPBENCH_PROFILE names the
profile (quick, default, full) that picks how lean the grid is and which tracks it records.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import inspect
import json
import math
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
from threadpoolctl import get_cached_controller

from accuracy.backends import get_backend
from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import get_format
from accuracy.core.files import write_atomic
from accuracy.core.threads import all_cores
from accuracy.judge.metric_table import BY_NAME, Metric, benchmark_class_name, tracks
from accuracy.reference.inputs import DEFAULT_CONDITION
from accuracy.run.profiles import Profile, current_profile
from accuracy.run.suite_passes import MEASUREMENTS_VAR
from accuracy.workflows.evaluation import Case

RUNS = 3  # runs per case: outputs that differ among them make the case not reproducible
FAILED = "failed"  # a shared measurement that raised: its message
MEASURE, READ = "measure", "read"


def current_pass() -> str | None:
    """`opbench run`'s pass for this asv run (accuracy/run/suite_passes.py), None for a plain run.
    asv runs this suite (the checkout's) against each commit's installed opbench: one from before
    the passes (a history run of an older commit) runs every benchmark in the first pass."""
    try:
        from accuracy.run.suite_passes import current_pass as installed
    except ImportError:
        return None
    return installed()


def hide_outside_measure_pass(namespace: dict) -> None:
    """A hand-written benchmark module runs once, in the measure pass: the read pass sees none of
    its classes (asv discovers what a module's namespace holds)."""
    if current_pass() == READ:
        for name in [n for n, v in namespace.items() if isinstance(v, type) and v.__module__ == namespace["__name__"]]:
            del namespace[name]


SUITE_VERSION = 1  # bump when the meaning of a benchmark changes; code edits alone keep history
# The frameworks are preloaded only in asv's forkserver (`benchmark.py run_server ...`), which forks
# every benchmark process: anywhere else (asv's discovery, setup_cache, a spawned benchmark process,
# a test) that import is wasted (~9 CPU-s with TensorFlow); the backend imports its framework when
# an implementation of it is about to run
FORKSERVER = sys.argv[1:2] == ["run_server"]
# what an `opbench run --bench` selection runs (accuracy/run/suite_passes.py, PRELOAD_VAR); unset:
# every backend of the module's cases
_SELECTED = os.environ.get("OPBENCH_PRELOAD")
PRELOADED = None if _SELECTED is None else set(filter(None, _SELECTED.split(",")))


def shared(scratch: Path | None, key: str, measure: Callable[[], dict]) -> dict:
    """`measure()`, once per run: asv runs each track in its own process, so the first process to
    need `key` leaves the result in the run's scratch folder (`_OpBenchmark.setup_cache`, or the
    folder `opbench run`'s two passes share) for the others. A measurement that raised is
    recorded too: the other tracks of the case fail with its message instead of measuring again,
    and so do they where the measuring process died (each would wait for asv's timeout again).
    Without a scratch folder (a direct call, as in the tests) it measures every time."""
    folder = os.environ.get(MEASUREMENTS_VAR) or scratch
    if folder is None:
        return measure()
    where = "|".join(os.environ.get(v, "") for v in ("ASV_ENV_NAME", "ASV_COMMIT")) + f"|{sys.prefix}"
    path = Path(folder) / f"{hashlib.sha256(f'{where}|{key}'.encode()).hexdigest()}.json"
    started = path.with_suffix(".started")
    if path.exists():
        measured = json.loads(path.read_text())
        if FAILED in measured:
            raise RuntimeError(f"the measurement of this case failed: {measured[FAILED]}")
        return measured
    if started.exists():  # its process died measuring (asv's timeout, a crash): not once per track
        raise RuntimeError("the measurement of this case did not finish in the process that started it")
    write_atomic(started, "")
    try:
        measured = measure()
    except Exception as exc:
        write_atomic(path, json.dumps({FAILED: f"{type(exc).__name__}: {exc}"}))
        raise
    write_atomic(path, json.dumps(measured))  # a concurrent reader sees all or nothing
    return measured


def output_digest(output: np.ndarray) -> int:
    """The first 52 bits of the SHA-256 of the output's dtype, shape and bytes: an integer a float64
    asv track holds exactly, equal for equal bits (a chance collision is 1 in 2**52)."""
    digest = hashlib.sha256(f"{output.dtype.str}{output.shape}".encode() + output.tobytes()).digest()
    return int.from_bytes(digest[:7], "big") >> 4


def scratch_folder(self) -> str:
    """asv's `setup_cache` of every generated class: the run's scratch folder, where one process
    per parameter combination leaves the measurement the other tracks read (`shared`). asv keys
    `setup_cache` by its source line, so every class that uses this function shares one folder:
    asv makes it once per run (per environment and commit), runs every benchmark in it and removes
    it when the last one ends."""
    return os.getcwd()


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

    # `opbench run` gives both passes one measurements folder (MEASUREMENTS_VAR, read by `shared`):
    # asv's setup_cache there only started one more process per pass and batch, which imported the
    # suite to return a folder nothing read (~1 CPU-s)
    if not os.environ.get(MEASUREMENTS_VAR):
        setup_cache = scratch_folder

    def setup(self, *args):
        # asv passes setup_cache's folder first; a direct call (tests) passes the parameters only
        scratch, params = (args[0], args[1:]) if len(args) > len(self.param_names) else (None, args)
        self.scratch = None if scratch is None else Path(scratch)
        self.p = dict(zip(self.param_names, params, strict=True))
        self._threads = None
        if current_pass() != READ:  # a read-pass track only reads the measurement: no framework is touched
            self._prepare()

    def _spec(self) -> tuple[str, str, int, str, int]:
        """(implementation, dtype, size, condition, threads) of the parameter combination."""
        impl_name, dtype = self.p["impl_dtype"].rsplit("@", 1)
        return impl_name, dtype, self.p["size"], self.p.get("condition", DEFAULT_CONDITION), self.p["threads"]

    def _prepare(self) -> None:
        """The case's rounded inputs in the backend's arrays, under the case's thread count."""
        impl_name, dtype, size, condition, self.threads = self._spec()
        op = get_op(self.op_name)
        self.case = Case(op, get_format(dtype), size, condition)
        self.impl = op.impl(impl_name, dtype)
        self.backend = get_backend(self.impl.backend)
        self.native = {k: self.backend.to_native(v) for k, v in self.case.inputs.items()}
        self._threads = self.backend.thread_limit(self.threads)
        self._threads.__enter__()

    def teardown(self, *args):
        if self._threads is not None:
            self._threads.__exit__(None, None, None)

    def _call(self):
        self.backend.call(self.impl.fn, self.native)
        self.backend.synchronize()

    def time_op(self, *args):
        self._call()

    def _measured(self) -> dict:
        """The error summary and the verdict, measured once per run and shared by the value tracks:
        the op, the references, the bound and the typical tier are evaluated by the first track
        process of a parameter combination (see `shared`)."""
        key = "|".join(map(str, (self.op_name, *self._spec())))
        return shared(self.scratch, key, self._measure_now)

    def _measure_now(self) -> dict:
        """Run the implementation RUNS times: if the outputs differ, the case is not reproducible
        and its accuracy tracks report the worst run; the digest is of the first run's bits.
        One more run at the other end of the thread range (1 thread, or all cores from the 1-thread
        column) says whether the bits change with threads; at all cores a 1-thread result with other
        bits is judged too, and the tracks report the worse."""
        if self._threads is None:  # a read-pass track whose measurement is missing measures itself
            self._prepare()
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

    def track(self, *args):
        return self._measured()[metric.field]

    track.__name__ = metric.track
    track.__doc__ = metric.doc
    track.unit = metric.unit  # asv reads the unit from the function attribute
    return track


for _metric in tracks():
    setattr(_OpBenchmark, _metric.track, _track_method(_metric))
# asv records each benchmark's code, read with inspect from its methods and setup, anew for each of
# the suite's ~580 benchmarks though they share these ~30 functions (0.4 of a discovery's 2 CPU-s
# here, paid by every asv call of a run); each carries its source as asv reads it (`pretty_source`)
for _method in vars(_OpBenchmark).values():
    if inspect.isfunction(_method):
        _lines = inspect.getsourcelines(_method)[0]
        _method.pretty_source = textwrap.dedent("\n".join(line.rstrip() for line in _lines))
MEASURING_TRACK = BY_NAME["verdict_tier"].track  # in the measure pass, with time_op: it measures each case


def _cases(op, profile: Profile) -> list[str]:
    cases = []
    for dtype in profile.dtypes:
        seen = set()
        for impl in op.available_impls(dtype):
            if impl.backend in profile.skip_backends or (profile.lean(impl.backend) and impl.backend in seen):
                continue
            seen.add(impl.backend)
            cases.append(f"{impl.name}@{dtype}")
    return cases


def benchmark_classes(family: str) -> dict[str, type]:
    """One benchmark class per op of `family`, named like the op (`Linear`, `LogSoftmax`)."""
    profile = current_profile()
    # tracks the profile leaves out are hidden from asv's discovery (it collects functions only)
    hidden = {metric.track: None for metric in tracks() if not profile.records(metric.name)}
    # `opbench run`'s two passes (accuracy/run/suite_passes.py): the measuring benchmarks, then the readers
    measuring = {"time_op", MEASURING_TRACK}
    suite_pass = current_pass()
    if suite_pass == MEASURE:
        hidden |= {metric.track: None for metric in tracks() if metric.track not in measuring}
    elif suite_pass == READ:
        hidden |= dict.fromkeys(measuring)
    classes = {}
    for op in all_ops():
        if op.family != family:
            continue
        cases = _cases(op, profile)
        if not cases:
            continue
        for backend in {case.split(":")[0] for case in cases} if FORKSERVER and suite_pass != READ else ():
            if PRELOADED is None or backend in PRELOADED:
                get_backend(backend).preload()  # paid once, not per benchmark process
        name = benchmark_class_name(op.name)
        conditions = op.condition_names()
        grid = {"impl_dtype": cases, "size": list(op.bench_sizes[: profile.sizes])}
        if len(conditions) > 1:  # a parameter wherever the op has several, so every profile keeps its names
            grid["condition"] = list(conditions[: profile.conditions])
        grid["threads"] = list(profile.threads)
        classes[name] = type(
            name,
            (_OpBenchmark,),
            {
                "op_name": op.name,
                "param_names": list(grid),
                "params": list(grid.values()),
                "version": f"{op.name}-op{op.version}-suite{SUITE_VERSION}",
                **hidden,
            },
        )
    ready_to_fork()
    return classes


def ready_to_fork() -> None:
    """The end of a suite module's import, where asv's forkserver forks every benchmark process from
    once it has imported the last. Frozen objects are skipped by the children's garbage collector,
    so it does not touch (and copy) the preloaded frameworks' pages (measured: 0.39 s per forked
    process with TensorFlow, JAX and ONNX Runtime loaded, 0.001 s frozen). Every measuring process
    limits its threads through threadpoolctl's cached controller, which reads each loaded library
    (/proc/self/maps): read here, after the preloads, it is inherited (10 ms of a Dot verdict's
    35); threadpoolctl reads them again in a process that has imported a module since."""
    if FORKSERVER and current_pass() != READ:
        get_cached_controller()
    gc.freeze()


def _listing_only() -> None:
    """asv's discovery and `asv check` import the suite to list it and run no benchmark: the BLAS
    providers they load for the cases need not bind torch's kernels first (0.2 CPU-s per process,
    three discoveries per `opbench run`). An older commit's opbench (a history run) has no switch."""
    if Path(sys.argv[0]).name == "benchmark.py" and sys.argv[1:2] in (["discover"], ["check"]):
        from accuracy.backends.blas import providers

        getattr(providers, "runs_no_op", lambda: None)()


_listing_only()


def _hash_each_code_once() -> None:
    """asv_runner 0.3 hashes each benchmark's code token by token even where the benchmark names
    its version (every generated one does), and then drops the hash: the same ~30 functions'
    code, tokenized anew for each of ~580 benchmarks in every discovery and forkserver of a run
    (0.1 CPU-s of a discovery's 0.7). The hash is a function of the code alone: memoized, each
    code is hashed once and every benchmark gets the same value."""
    base = sys.modules.get("asv_runner.benchmarks._base")  # only where asv imports the suite
    if base is not None and hasattr(base, "code_fingerprint") and not hasattr(base.code_fingerprint, "cache_info"):
        base.code_fingerprint = functools.cache(base.code_fingerprint)


_hash_each_code_once()
