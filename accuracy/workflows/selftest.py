"""`opbench selftest`: measure the verdicts' power on the catalog itself, generated from the registry.

For each op and dtype it judges
- every correct implementation here (stable, no declared semantics, no declared finding): a suspicious or beyond
  verdict on one is an alarm. An alarm is *confirmed* when an independent measure agrees that
  the result is not rounding — it breaks a published contract (IEEE 754 sqrt, numpy's ulp
  table), or it errs >= 16x the least accurate correct algorithm (emulated) — and otherwise
  counted as a false alarm;
- mutants of a correct implementation's inputs or output: a parameter (bias, divisor) off by
  (1+2^-k), one term dropped, accumulation in float16/bfloat16, inputs truncated to
  TF32/bfloat16, results shifted by k ulps, and the op's unstable algorithms.

E_least, "the error of the least accurate correct algorithm", is the largest of: the errors of
the correct implementations, the op's formula in plain round-to-nearest recursive order at the
compute precision, the RMS error of the typical tier's Monte Carlo runs (its expected error,
so a lucky single output does not shrink it), and half an ulp (what correct rounding errs), in
ulps of the result's format, max over elements. A mutant whose error is >= 16 E_least must be
caught (suspicious or beyond). An implementation declared `varies_run_to_run` is judged on
several calls, and left out of E_least: its error on one call would make the self-test's own
numbers change from run to run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from accuracy.backends import backends_for, get_backend
from accuracy.catalog.registry import Impl, OpInfo, all_ops, get_op
from accuracy.core.dtypes import ALL_DTYPES, FORMATS, FloatFormat, ulp
from accuracy.core.threads import all_cores
from accuracy.judge.emulation import emulate
from accuracy.judge.error_metrics import rounding_error
from accuracy.judge.precision import TF32, compute_format
from accuracy.judge.verdicts import BEYOND, SUSPICIOUS, UNDETERMINED, Evidence
from accuracy.reference.inputs import DEFAULT_CONDITION
from accuracy.workflows.cluster import thread_limits, work_pool
from accuracy.workflows.evaluation import Case

MUST_CATCH = 16.0  # the target: catch every mutant at >= 16x the least accurate correct error
HALF_ULP = 0.5  # no algorithm can promise less: E_least is at least a correct rounding's error
BIAS_INPUTS = ("b", "bias", "c")  # additive parameters: a bias off by (1+2^-k) is a classic bug
SLOW_BACKENDS = ("torch-compile",)  # seconds of compilation per implementation: `--all` includes it
ALARMS = (SUSPICIOUS, BEYOND)
VARYING_CALLS = 4  # calls judged of an implementation whose bits change from call to call


@dataclass
class Mutant:
    name: str
    output: np.ndarray  # emptied once judged: nothing reads it after, and it is what makes a case large
    error_ulp: float = 0.0
    verdict: str = ""


@dataclass
class CaseReport:
    op: str
    dtype: str
    condition: str
    size: int
    correct: int = 0
    judged: int = 0  # judgements of the correct implementations: several calls of one that varies
    alarms: list[str] = field(default_factory=list)  # "impl: verdict: reason"
    false_alarms: list[str] = field(default_factory=list)
    undetermined: int = 0
    least_ulp: float = 0.0
    mutants: list[Mutant] = field(default_factory=list)

    @property
    def in_scope(self) -> list[Mutant]:
        return [
            m
            for m in self.mutants
            if (m.error_ulp >= MUST_CATCH * self.least_ulp and np.isfinite(m.error_ulp)) or np.isinf(m.error_ulp)
        ]

    @property
    def caught(self) -> list[Mutant]:
        return [m for m in self.in_scope if m.verdict in ALARMS]

    def smallest_caught(self) -> Mutant | None:
        caught = [m for m in self.mutants if m.verdict in ALARMS and np.isfinite(m.error_ulp)]
        return min(caught, key=lambda m: m.error_ulp) if caught else None

    def as_dict(self) -> dict:
        smallest = self.smallest_caught()
        return {
            "op": self.op,
            "dtype": self.dtype,
            "condition": self.condition,
            "size": self.size,
            "correct_impls": self.correct,
            "alarms": self.alarms,
            "false_alarms": self.false_alarms,
            "undetermined": self.undetermined,
            "least_accurate_correct_ulp": self.least_ulp,
            "mutants": len(self.mutants),
            "must_catch": len(self.in_scope),
            "caught": len(self.caught),
            "missed": [m.name for m in self.in_scope if m.verdict not in ALARMS],
            "smallest_caught": None
            if smallest is None
            else {
                "mutant": smallest.name,
                "error_ulp": smallest.error_ulp,
                "x_least": smallest.error_ulp / self.least_ulp if self.least_ulp else float("inf"),
            },
        }


def _error_ulp(evidence: Evidence) -> np.ndarray:
    """The ulp errors are counted in: at each element's exact value, or where the op's error
    analysis is normwise (an FFT's bins) at the RMS magnitude of its slice, so that a bin that is
    exactly 0 does not turn a correct FFT's 1e-9 into 1e37 ulps."""
    axes = evidence.op.normwise_axes
    if not axes:
        return evidence.ulp
    magnitude = np.sqrt(np.mean(np.square(evidence.exact.hi), axis=axes, keepdims=True))
    return np.broadcast_to(ulp(magnitude, evidence.fmt), evidence.exact.shape)


def _max_ulp(output, evidence: Evidence) -> float:
    err = rounding_error(output, evidence.exact, evidence.fmt) / _error_ulp(evidence)
    return float(np.max(err, initial=0.0))


def _scaled(values: np.ndarray, factor: float, fmt: FloatFormat) -> np.ndarray:
    return fmt.round(np.asarray(values, dtype=np.float64) * factor)


def _shifted(values: np.ndarray, steps: int, fmt: FloatFormat) -> np.ndarray:
    """Each finite element moved `steps` representable numbers away from zero: the bit pattern
    of a sign-magnitude float counts representable numbers."""
    values = np.asarray(values, dtype=fmt.np_dtype)
    bits = values.view(f"u{fmt.np_dtype.itemsize}")
    moved = (bits + np.asarray(steps, dtype=bits.dtype)).view(fmt.np_dtype)
    return np.where(np.isfinite(values.astype(np.float64)), moved, values).astype(fmt.np_dtype)


def _exponents(fmt: FloatFormat) -> range:
    """k in (1 + 2^-k): from a few bits to the format's last bits."""
    return range(2, fmt.precision + 1, max(1, fmt.precision // 8))


def _run(case: Case, impl: Impl, inputs=None) -> np.ndarray | None:
    """A mutant's output, or None where the mutation makes the op fail (a singular matrix)."""
    try:
        return case.run(impl, inputs=inputs)
    except Exception:
        return None


def mutants(case: Case, base: Impl, base_output: np.ndarray, evidence: Evidence) -> list[Mutant]:
    """Every mutation operator that applies to this op, from its record's data."""
    fmt, op = case.fmt, case.op
    out: list[tuple[str, np.ndarray | None]] = []  # None: the mutant could not run
    for k in _exponents(fmt):
        out.append((f"divisor x(1+2^-{k})", _scaled(base_output, 1 + 2.0**-k, fmt)))
        for name in BIAS_INPUTS:
            if name in case.inputs:
                inputs = dict(case.inputs, **{name: _scaled(case.inputs[name], 1 + 2.0**-k, fmt)})
                out.append((f"{name} x(1+2^-{k})", _run(case, base, inputs)))
    first = next(iter(case.inputs))
    if case.inputs[first].ndim and case.inputs[first].shape[-1] > 1:
        dropped = case.inputs[first].copy()
        dropped[..., dropped.shape[-1] // 2] = 0
        out.append((f"term {first}[..., n/2] dropped", _run(case, base, dict(case.inputs, **{first: dropped}))))
    for low in ("float16", "bfloat16"):
        if FORMATS[low].precision < fmt.precision:
            acc = emulate(op.working_formula, evidence.inputs64, FORMATS[low], "nearest", store=fmt)
            if acc is not None:
                out.append((f"accumulation in {low}", fmt.round(acc.astype(np.float64))))
    for narrow in (TF32, FORMATS["bfloat16"]):
        if narrow.precision < fmt.precision:
            inputs = {
                k: fmt.round(narrow.round(v.astype(np.float64)).astype(np.float64))
                if k in BIAS_INPUTS or v.dtype.kind == "f"
                else v
                for k, v in case.inputs.items()
            }
            out.append((f"inputs truncated to {narrow.name}", _run(case, base, inputs)))
    for steps in (1, 2, 4, 16, 64, 256):
        out.append((f"results shifted {steps} ulp", _shifted(base_output, steps, fmt)))
    for impl in op.available_impls(fmt.name):
        if not impl.stable and impl.backend not in SLOW_BACKENDS:
            out.append((f"unstable {impl.name}", _run(case, impl)))
    return [Mutant(name, output) for name, output in out if output is not None]


def _correct(op: OpInfo, dtype: str, everything: bool) -> list[Impl]:
    return [
        i
        for i in op.available_impls(dtype)
        if i.stable and not i.semantics and not i.finding and (everything or i.backend not in SLOW_BACKENDS)
    ]


def _emulated_least(case: Case, evidence: Evidence, compute: FloatFormat) -> float:
    """The least accurate correct algorithm at the compute precision `compute`, by emulation: the
    op's formula in recursive round-to-nearest, and the Monte Carlo runs' expected error."""
    emulated = []
    nearest = emulate(case.op.working_formula, evidence.inputs64, compute, "nearest", store=case.fmt)
    if nearest is not None:
        emulated.append(_max_ulp(case.fmt.round(nearest.astype(np.float64)), evidence))
    model = evidence.typical(compute)
    if model is not None:
        with np.errstate(invalid="ignore"):
            expected = model.scale / _error_ulp(evidence)
        emulated.append(float(np.max(expected[np.isfinite(expected)], initial=0.0)))
    return max(emulated, default=0.0)


def selftest_case(
    op: OpInfo, dtype: str, size: int | None = None, condition: str = DEFAULT_CONDITION, everything: bool = False
) -> CaseReport | None:
    correct = _correct(op, dtype, everything)
    if not correct:
        return None
    case = Case(op, FORMATS[dtype], size or op.default_size, condition)
    evidence = Evidence(op, case.inputs, case.fmt, case.exact)
    report = CaseReport(op.name, dtype, condition, case.size, correct=len(correct))
    calls = {i.name: [case.run(i) for _ in range(VARYING_CALLS if i.varies_run_to_run else 1)] for i in correct}
    report.judged = sum(len(outputs) for outputs in calls.values())
    base = next((impl for impl in correct if not impl.varies_run_to_run), correct[0])
    # the implementations sharing a compute precision share its emulation (one deterministic run)
    computes = {impl.name: compute_format(impl, case.fmt, op.family) for impl in correct}
    least = {c: _emulated_least(case, evidence, c) for c in dict.fromkeys(computes.values())}
    emulated = {name: least[compute] for name, compute in computes.items()}
    errors = {impl.name: [_max_ulp(o, evidence) for o in calls[impl.name]] for impl in correct}
    reproducible = [max(errors[impl.name]) for impl in correct if not impl.varies_run_to_run]
    report.least_ulp = max([HALF_ULP, *reproducible, *emulated.values()])
    for impl in correct:
        for output, error in zip(calls[impl.name], errors[impl.name], strict=True):
            j = evidence.judge(output, impl)
            report.undetermined += j.verdict == UNDETERMINED
            if j.verdict in ALARMS:
                line = f"{impl.name}: {j.label}: {j.reason}"
                report.alarms.append(line)
                if not (j.contract or error >= MUST_CATCH * max(emulated[impl.name], HALF_ULP)):
                    report.false_alarms.append(line)
    for m in mutants(case, base, calls[base.name][0], evidence):
        m.error_ulp = _max_ulp(m.output, evidence)
        m.verdict = evidence.judge(m.output, base).verdict if m.output.shape == evidence.exact.shape else BEYOND
        report.mutants.append(m)
    return report


def selftest(
    op_names: list[str] | None = None,
    dtypes: tuple[str, ...] = ALL_DTYPES,
    size: int | None = None,
    small: bool = False,
    everything: bool = False,
    progress=None,
    dask: str | None = None,
) -> Iterator[CaseReport]:
    """Every op (or `op_names`), dtype and condition, in that order; `small` runs each at its test size.

    The cases run one after another here, or all at once on the Dask cluster `dask` names; each
    holds every backend to this machine's core count wherever it runs, so a report is the same
    bits on a cluster. `progress(done, total, label, seconds)` follows each finished case.
    """
    ops = [get_op(n) for n in op_names] if op_names else all_ops()
    cases = [
        (op.name, dtype, op.test_size if small else size, condition)
        for op in ops
        for dtype in dtypes
        if dtype in op.dtypes()
        for condition in op.condition_names()
    ]
    threads, start = all_cores(), time.perf_counter()

    def finished(i: int, report: CaseReport | None) -> Iterator[CaseReport]:
        if progress:
            progress(
                i + 1, len(cases), " ".join(str(c) for c in cases[i] if c is not None), time.perf_counter() - start
            )
        if report is not None:
            yield report

    if dask is None:
        for i, case in enumerate(cases):
            yield from finished(i, selftest_task(*case, everything, threads, False))
        return
    preload = [name for op_name in dict.fromkeys(c[0] for c in cases) for name in case_backends(get_op(op_name))]
    with work_pool(dask, preload=preload) as pool:
        futures = [pool.submit(selftest_task, *case, everything, threads, True) for case in cases]
        try:
            for i, future in enumerate(futures):
                yield from finished(i, future.result())
        finally:
            for future in futures:
                future.cancel()


def case_backends(op: OpInfo) -> list[str]:
    """The backends a case of `op` runs on: its implementations' backends, and torch."""
    return list(dict.fromkeys(["torch", *(name for impl in op.impls for name in backends_for(impl.backend))]))


def selftest_task(
    op_name: str, dtype: str, size: int | None, condition: str, everything: bool, threads: int, on_worker: bool
) -> CaseReport | None:
    """One case by name, on `threads` threads in every backend it uses (held for the worker's life
    on a Dask worker); the report keeps no outputs (mutants' arrays are what make a case large, and
    nothing reads them after judging)."""
    op = get_op(op_name)
    backends = [backend for backend in dict.fromkeys(map(get_backend, case_backends(op))) if backend.available()]
    with thread_limits(backends, threads, for_life=on_worker):
        report = selftest_case(op, dtype, size, condition, everything)
    if report is not None:
        for m in report.mutants:
            m.output = np.empty(0, m.output.dtype)
    return report


def summary(reports: list[CaseReport]) -> dict:
    in_scope = sum(len(r.in_scope) for r in reports)
    caught = sum(len(r.caught) for r in reports)
    return {
        "cases": len(reports),
        "correct_judgements": sum(r.judged for r in reports),
        "false_alarms": sum(len(r.false_alarms) for r in reports),
        "confirmed_alarms": sum(len(r.alarms) - len(r.false_alarms) for r in reports),
        "undetermined": sum(r.undetermined for r in reports),
        "must_catch": in_scope,
        "caught": caught,
        "catch_rate": caught / in_scope if in_scope else 1.0,
    }
