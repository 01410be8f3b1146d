"""Whole-domain accuracy scans of elementwise functions: every input of a format, every impl.

Like Zimmermann et al.'s "Accuracy of Mathematical Functions" tables, but for the libraries
people call (numpy, torch, scipy, ...) on this build: all 2**32 float32 inputs (2**16 for
float16/bfloat16) go through each implementation and the fast correctly rounded reference
(accuracy/reference/correctly_rounded.py), in chunks of bounded memory. float64 has too many inputs: it gets a
sample, the function's known hard inputs plus random ones within every binade.

Only results that differ from the correctly rounded value are measured in ulps (they are few),
so a scan costs about one reference evaluation plus one call per implementation.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accuracy.backends import get_backend
from accuracy.catalog.registry import Impl, OpInfo, get_op
from accuracy.core.dtypes import FloatFormat, get_format
from accuracy.core.errors import OpbenchError
from accuracy.core.limits import check_sample
from accuracy.judge.contracts import Contract, contract_for, ulps_from_correctly_rounded
from accuracy.judge.error_metrics import correctly_rounded, ulp_error
from accuracy.reference.correctly_rounded import cores
from accuracy.reference.exact import Exact
from accuracy.reference.hard_inputs import hard_inputs
from accuracy.workflows.cluster import ClusterLost, thread_limits, work_pool

SCAN_DTYPES = ("float32", "float16", "bfloat16")
CHUNK = 1 << 18  # inputs per task here: ~15 MB of working arrays; a few tasks are in flight at a time
# On a cluster a task also pays the scheduler's round trip and the worker's fresh allocations (see
# docs/scale-out.md): 8 times larger tasks make that small, while leaving each worker several tasks.
CLUSTER_CHUNK = 1 << 21
TASKS_PER_WORKER = 4
HISTOGRAM_EDGES = (0.5, 1.0, 2.0, 4.0, 16.0, 256.0, np.inf)  # ulp-error bins: (0, 0.5], (0.5, 1], ...
WORST_KEPT = 3
_BITS = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}


@dataclass
class ImplScan:
    """What one implementation did over the scanned inputs."""

    impl: Impl | None  # None in a chunk's part, which carries counts only
    contract: Contract | None
    checked: int = 0
    not_correctly_rounded: int = 0
    max_ulp: float = 0.0  # 0 until a result differs from the correctly rounded one
    max_steps: float = 0.0  # representable numbers between a result and the correctly rounded one
    # (ulp, x, result, exact, position of x among the scanned inputs): the position breaks ties
    worst: list[tuple[float, float, float, float, int]] = field(default_factory=list)
    histogram: list[int] = field(default_factory=lambda: [0] * len(HISTOGRAM_EDGES))

    def contract_holds(self) -> bool | None:
        return None if self.contract is None else self.max_steps <= self.contract.max_ulp

    def add(
        self, x: np.ndarray, result: np.ndarray, exact: Exact, rounded: np.ndarray, fmt: FloatFormat, start: int = 0
    ) -> None:
        """Measure `result` on inputs `x` (positions start.. of the scan) against the reference,
        correctly rounded to `rounded`."""
        part = ImplScan(self.impl, self.contract, checked=x.size)
        differs = np.flatnonzero(result != rounded)
        differs = differs[~(np.isnan(result[differs]) & np.isnan(rounded[differs]))]
        part.histogram[0] = x.size - differs.size
        if differs.size:
            part.not_correctly_rounded = differs.size
            errors = ulp_error(result[differs], Exact(exact.hi[differs], exact.lo[differs]))
            part.max_steps = _max_steps(result[differs], rounded[differs], fmt)
            part.histogram = [h + c for h, c in zip(part.histogram, _bin_counts(errors), strict=False)]
            top = np.arange(errors.size)
            if errors.size > WORST_KEPT:  # the kept few, and every error tied with the smallest of them
                kept = np.argpartition(-errors, WORST_KEPT - 1)[:WORST_KEPT]
                top = np.union1d(kept, np.flatnonzero(errors >= errors[kept].min()))
            order = top[np.lexsort((top, -errors[top]))][:WORST_KEPT]  # largest first, the first input among equals
            part.worst = [
                (
                    float(errors[i]),
                    float(x[differs[i]]),
                    float(result[differs[i]]),
                    float(exact.hi[differs[i]] + exact.lo[differs[i]]),
                    start + int(differs[i]),
                )
                for i in order
            ]
        self.merge(part)

    def merge(self, part: ImplScan) -> None:
        """Take in a scan of further inputs, in any order: among equal errors the earlier input
        comes first, so the result does not depend on how the inputs were chunked or merged."""
        self.checked += part.checked
        self.not_correctly_rounded += part.not_correctly_rounded
        self.max_steps = max(self.max_steps, part.max_steps)
        self.histogram = [h + c for h, c in zip(self.histogram, part.histogram, strict=False)]
        self.worst = sorted(self.worst + part.worst, key=lambda w: (-w[0], w[4]))[:WORST_KEPT]
        self.max_ulp = self.worst[0][0] if self.worst else 0.0


def _max_steps(result: np.ndarray, rounded: np.ndarray, fmt: FloatFormat) -> float:
    """The most representable numbers between a result and its correctly rounded value.

    For the narrow formats, by bit patterns: sign-magnitude bits made two's complement are in
    the order of the values, so their difference counts the numbers between (inf is one past
    the largest finite number). float64 samples are small: the contracts' own measure.
    """
    if fmt.name not in _BITS:
        return float(ulps_from_correctly_rounded(result, rounded, fmt).max())
    bits = _BITS[fmt.name]
    sign = np.int64(1) << np.int64(8 * np.dtype(bits).itemsize - 1)

    def ordered(a):
        b = a.view(bits).astype(np.int64)
        return np.where(b & sign, -(b & (sign - 1)), b)

    return float(np.max(np.abs(ordered(result) - ordered(rounded))))


def _bin_counts(errors: np.ndarray) -> list[int]:
    idx = np.searchsorted(np.asarray(HISTOGRAM_EDGES), errors, side="left")
    return np.bincount(np.minimum(idx, len(HISTOGRAM_EDGES) - 1), minlength=len(HISTOGRAM_EDGES)).tolist()


@dataclass
class ScanResult:
    op: str
    fmt: FloatFormat
    total: int  # inputs the scan covers when complete
    impls: list[ImplScan]
    done: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    error: str | None = None  # why an interrupted scan stopped, when it was not Ctrl-C


def scannable(op: OpInfo) -> bool:
    """Elementwise ops of one input `x` (a vector of the requested size, not rows like softmax's)."""
    probe = op.generate(np.random.default_rng(0), 4)
    return set(probe) == {"x"} and probe["x"].shape == (4,) and op.family in ("elementwise", "activations")


def select_impls(op: OpInfo, fmt: FloatFormat, names: list[str] | None) -> list[Impl]:
    available = op.available_impls(fmt.name)
    if not names:
        if not available:
            raise OpbenchError(f"op {op.name!r} has no implementation for {fmt.name} on this machine")
        return available
    chosen = []
    for name in names:
        impl = op.impl(name, fmt.name)  # one-line error for an unknown name
        if impl not in available:
            raise OpbenchError(f"{name} is not available for {fmt.name} here")
        chosen.append(impl)
    return chosen


def all_inputs(fmt: FloatFormat, start: int, stop: int) -> np.ndarray:
    """The inputs whose bit patterns are start .. stop-1, in `fmt`."""
    return np.arange(start, stop, dtype=_BITS[fmt.name]).view(fmt.np_dtype)


def sample_float64(n: int, seed: int = 0, name: str | None = None) -> np.ndarray:
    """n float64 inputs: special values and function `name`'s known hard inputs
    (accuracy/reference/hard_inputs.py) first, then random significands in binades drawn uniformly (both
    signs, subnormals as one binade), so every magnitude is covered, not just [0, 1)."""
    info = np.finfo(np.float64)
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1.0,
            -1.0,
            info.tiny,
            info.smallest_subnormal,
            info.tiny - info.smallest_subnormal,
            -info.smallest_subnormal,
            info.max,
            -info.max,
            np.nextafter(1.0, 2.0),
            np.nextafter(1.0, 0.0),
            np.pi,
            -np.pi,
            0.5,
            2.0,
        ]
    )
    known = np.concatenate([special, hard_inputs(name) if name else []])
    rng = np.random.Generator(np.random.PCG64(seed))
    count = max(0, n - known.size)
    exponent = rng.integers(0, 2047, count, dtype=np.uint64)  # biased exponent 0 .. 2046 (0: subnormal)
    bits = (
        (rng.integers(0, 2, count, dtype=np.uint64) << np.uint64(63))
        | (exponent << np.uint64(52))
        | rng.integers(0, 1 << 52, count, dtype=np.uint64)
    )
    return np.concatenate([known, bits.view(np.float64)])[:n]


def _run(impl: Impl, x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    backend = get_backend(impl.backend)
    with np.errstate(all="ignore"):
        out = backend.call(impl.fn, {"x": backend.to_native(x)})
        backend.synchronize()
    return backend.to_numpy(out, fmt)


def scan(
    op: OpInfo,
    fmt: FloatFormat,
    impls: list[Impl],
    *,
    sample: int | None = None,
    chunk: int | None = None,
    progress=None,
    threads: int | None = None,
    dask: str | None = None,
) -> ScanResult:
    """Scan `impls` of `op` over every input of `fmt` (or `sample` float64 inputs).

    Chunks of inputs go to `threads` workers here (default: every core; numpy's and torch's
    kernels release the GIL), or to the Dask cluster `dask` names (accuracy.workflows.cluster) in
    larger chunks (`cluster_chunk`), each implementation held to one thread meanwhile. Merging
    does not depend on the chunks or their order, so the result is the same bits whatever ran
    it. `progress(done, total, seconds)` is called after each chunk. Ctrl-C, or a cluster whose
    scheduler goes away, stops the scan and returns the chunks merged so far, with `interrupted`
    (and `error` for the cluster) set.
    """
    if not scannable(op):
        raise OpbenchError(
            f"op {op.name!r} is not an elementwise function of one input; scan covers elementwise and activation ops"
        )
    if fmt.name == "float64":
        if not sample:
            raise OpbenchError("float64 has 2**64 inputs: give --sample N")
        check_sample(sample)
        inputs = sample_float64(sample, name=op.name)
        total = inputs.size
    elif fmt.name in SCAN_DTYPES:
        if sample:
            raise OpbenchError(f"--sample is for float64; {fmt.name} is scanned whole")
        inputs, total = None, 1 << (8 * fmt.np_dtype.itemsize)
    else:
        raise OpbenchError(f"scan covers {', '.join(SCAN_DTYPES)} whole and float64 by --sample")
    scans = [
        ImplScan(impl, contract_for(op.name, impl, fmt, get_format(impl.compute.get(fmt.name, fmt.name))))
        for impl in impls
    ]
    result = ScanResult(op.name, fmt, total, scans)
    threads = threads or cores()

    start_time = time.perf_counter()
    backends = scan_backends(impls)
    with ExitStack() as limits, work_pool(dask, threads, [b.name for b in backends]) as pool:
        if dask is None:  # here, for the whole scan; a cluster's workers hold their own threads
            limits.enter_context(thread_limits(backends, 1))
        size = chunk or (CHUNK if dask is None else cluster_chunk(total, pool.workers))

        def submit(start: int) -> tuple[int, Any]:
            stop = min(total, start + size)
            x = inputs[start:stop] if inputs is not None else None
            if dask is None:
                return stop - start, pool.submit(scan_chunk, op, fmt, impls, start, stop, x)
            return stop - start, pool.submit(scan_chunk_named, op.name, fmt, impls, start, stop, x)

        in_flight: deque[Any] = deque()
        try:
            for start in [*_spread(range(0, total, size)), None]:
                if start is not None:
                    in_flight.append(submit(start))
                while in_flight and (start is None or len(in_flight) > 2 * pool.workers):
                    inputs_done, future = in_flight[0]
                    parts = future.result()
                    in_flight.popleft()
                    for s, p in zip(scans, parts, strict=True):
                        s.merge(p)
                    result.done += inputs_done
                    result.seconds = time.perf_counter() - start_time
                    if progress:
                        progress(result.done, total, result.seconds)
        except (KeyboardInterrupt, ClusterLost) as stop:
            for _, future in in_flight:
                future.cancel()
            result.interrupted = True
            result.error = str(stop) if isinstance(stop, ClusterLost) else None
            result.seconds = time.perf_counter() - start_time
    return result


def cluster_chunk(total: int, workers: int) -> int:
    """Inputs per task on a cluster: CLUSTER_CHUNK, halved (never below CHUNK) while that would
    leave fewer than TASKS_PER_WORKER tasks per worker. A power of two, as `_spread` wants."""
    size = CLUSTER_CHUNK
    while size > CHUNK and total < TASKS_PER_WORKER * workers * size:
        size //= 2
    return size


def scan_backends(impls: list[Impl]) -> list[Any]:
    """Every backend a scan runs: the implementations' and torch, whose float64 twins the reference runs."""
    return list(dict.fromkeys([get_backend("torch"), *(get_backend(impl.backend) for impl in impls)]))


def scan_chunk(
    op: OpInfo, fmt: FloatFormat, impls: list[Impl], start: int, stop: int, x: np.ndarray | None
) -> list[ImplScan]:
    """One chunk (bit patterns start..stop-1, or the sample `x`) through the reference and each impl.

    The parts it returns carry counts only (no Impl), which is all `ImplScan.merge` reads.
    """
    if x is None:
        x = all_inputs(fmt, start, stop)
    with np.errstate(all="ignore"):  # NaN inputs, overflow to infinity: expected here
        exact = op.exact({"x": x.astype(np.float64)}, fmt)
        rounded = fmt.round(exact.hi)
        # narrow formats: only values mpmath decided carry a lo, which may break a tie
        tie_broken: np.ndarray | list[int] = np.flatnonzero(exact.lo) if fmt.precision < 53 else []
        if len(tie_broken):
            near = Exact(exact.hi[tie_broken], exact.lo[tie_broken])
            rounded[tie_broken] = correctly_rounded(near, fmt).astype(fmt.np_dtype)
    parts = []
    for impl in impls:
        part = ImplScan(None, None)
        try:
            result = _run(impl, x, fmt)
        except Exception as exc:  # a library's failure is one line naming it, wherever the chunk ran
            why = (str(exc).strip().splitlines() or [""])[-1]
            raise OpbenchError(
                f"{impl.name} failed on inputs {start}..{stop - 1}: {type(exc).__name__}: {why}"
            ) from None
        part.add(x, result, exact, rounded, fmt, start)
        parts.append(part)
    return parts


def scan_chunk_named(
    op_name: str, fmt: FloatFormat, impls: list[Impl], start: int, stop: int, x: np.ndarray | None
) -> list[ImplScan]:
    """`scan_chunk` on a Dask worker: the op by name (its exact reference holds mpmath values that
    do not pickle), from the worker's own registry; the worker holds its backends to one thread
    from its first task on (`thread_limits(..., for_life=True)`), not per task."""
    with thread_limits(scan_backends(impls), 1, for_life=True):
        return scan_chunk(get_op(op_name), fmt, impls, start, stop, x)


def _spread(starts: range) -> list[int]:
    """Chunks in bit-reversed order: an interrupted scan has still sampled every part of the
    range (every binade, both signs), not just the smallest bit patterns."""
    n = len(starts)
    if n & (n - 1):
        return list(starts)
    width = max(1, (n - 1).bit_length())
    return [starts[int(f"{i:0{width}b}"[::-1], 2)] for i in range(n)]


def hex_of(value: float, fmt: FloatFormat) -> str:
    """The bit pattern of `value` in `fmt`, as C's `0x...` (as numpy's validation files write it)."""
    bits = np.array([value]).astype(fmt.np_dtype).view(_BITS.get(fmt.name, np.uint64))[0]
    return f"0x{int(bits):0{2 * fmt.np_dtype.itemsize}x}"


def as_rows(result: ScanResult) -> list[dict]:
    """One JSON-able record per implementation."""
    fmt = result.fmt
    rows = []
    for s in result.impls:
        rows.append(
            {
                "op": result.op,
                "dtype": fmt.name,
                "impl": s.impl.name if s.impl else None,
                "checked": s.checked,
                "max_ulp": s.max_ulp,
                "not_correctly_rounded": s.not_correctly_rounded,
                "max_ulp_from_correctly_rounded": s.max_steps,
                "worst": [
                    {"x": hex_of(x, fmt), "x_value": x, "result": hex_of(r, fmt), "exact": e, "ulp": u}
                    for u, x, r, e, _ in s.worst
                ],
                "histogram": {_bin_label(i): c for i, c in enumerate(s.histogram)},
                "contract_max_ulp": None if s.contract is None else s.contract.max_ulp,
                "contract_source": None if s.contract is None else s.contract.source,
                "contract_holds": s.contract_holds(),
                "complete": not result.interrupted and result.done == result.total,
            }
        )
    return rows


def _bin_label(i: int) -> str:
    low = 0.0 if i == 0 else HISTOGRAM_EDGES[i - 1]
    return f"({low:g}, {HISTOGRAM_EDGES[i]:g}]"


def scan_class_name(op: str, dtype: str) -> str:
    """The `full` asv profile's class holding one scan's tracks (benchmarks/bench_references.py)."""
    return f"Scan{op.capitalize()}{dtype.capitalize()}"


SCAN_TRACKS = {"track_max_ulp": "max_ulp", "track_not_correctly_rounded": "not_correctly_rounded"}


def zimmermann_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Function x library -> max ulp error, like Zimmermann et al.'s tables: (header, rows), for
    the report. `rows` are `as_rows` records of any number of scans. A column is a backend
    (numpy, torch, ...); a second implementation of one function on one backend gets its own."""

    def column(r):
        same_backend = [
            o
            for o in rows
            if (o["op"], o["dtype"]) == (r["op"], r["dtype"]) and o["impl"].split(":")[0] == r["impl"].split(":")[0]
        ]
        return r["impl"].split(":")[0] if same_backend[0] is r else r["impl"]

    columns = list(dict.fromkeys(column(r) for r in rows))
    funcs = list(dict.fromkeys((r["op"], r["dtype"]) for r in rows))
    cell = {(r["op"], r["dtype"], column(r)): r for r in rows}
    body = []
    for op, dtype in funcs:
        line = [op, dtype]
        for name in columns:
            r = cell.get((op, dtype, name))
            # a correctly rounded result is within 0.5 ulp: the entry of an impl with no miss
            line.append("" if r is None else f"{r['max_ulp'] if r['not_correctly_rounded'] else 0.5:.3g}")
        body.append(line)
    return ["function", "dtype", *columns], body
