"""The typical tier of a function with no worst-case bound (a user's `check --fn`, a model unit):
derived as typical.py derives it for registry ops, from the function's own runs with sampled
roundings, in stages that stop once the outputs to judge are settled; and an output's row.

The judge's side of `opbench check --fn` and of `opbench model`'s units: the workflows hand it the
function, its inputs and its float64 evaluation, and it gives the evidence to judge by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.judge.error_metrics import ulp_error
from accuracy.judge.typical import (
    RANDOM_RUNS,
    RUN_STAGES,
    SEED,
    TYPICAL_Z,
    TypicalModel,
    judged_errors,
    model_from_rms,
    model_from_runs,
    settled,
    typical_model,
)
from accuracy.judge.verdicts import Evidence, FunctionSubject, Judgement
from accuracy.reference.exact import Exact


def judged_row(label: str, output: np.ndarray, exact: Exact, judgement: Judgement) -> dict[str, Any]:
    """One output's row of a report: its verdict and the numbers behind it."""
    ulps = ulp_error(output, exact)
    finite = ulps[np.isfinite(ulps)]
    return {
        "label": label,
        "verdict": judgement.verdict,
        "reason": judgement.reason,
        "compute": judgement.compute,
        "contract": judgement.contract,
        "max_ulp": float(finite.max()) if finite.size else 0.0,
        "typical_ratio": judgement.typical_ratio,
        "bound_ratio": judgement.bound_ratio,
        "threshold_ulp": judgement.threshold_ulp,
        "lapack_ratio": judgement.lapack_ratio,
        "worst": judgement.worst,
    }


def run_stages(judged: Sequence[np.ndarray]) -> tuple[int, ...]:
    """The Monte Carlo runs taken in turn: in stages where the outputs to judge are known."""
    return RUN_STAGES if len(judged) else (RANDOM_RUNS,)


# a function's typical tier at each stage derived (0: the first-order spread's), with its basis
Stages = dict[int, tuple[TypicalModel, str]]


def _how(
    fmt: FloatFormat, runs: str, deterministic: str, sampled: str = f"RMS error of {RANDOM_RUNS} Monte Carlo runs"
) -> str:
    return (
        f"typical tier, derived as for registry ops: {runs} in {fmt.name}; scale = max({sampled}, "
        f"{deterministic}'s error) against its float64 evaluation, flagged above {TYPICAL_Z:g}x scale + 1 ulp"
    )


@dataclass(frozen=True)
class _TorchDerivation:
    """What each stage of a torch function's tier is derived against, and where it is kept."""

    exact: Exact
    fmt: FloatFormat
    products: FloatFormat | None
    stages: Stages | None

    def finished(
        self, stage: int, model: TypicalModel, sampled: str, unmodelled: set[str], contracted: set[str], roundings: int
    ) -> tuple[TypicalModel, str]:
        """The stage's tier, with its worst case and the basis that says how it was derived."""
        rounded_once = f"; modelled as one rounding each: {', '.join(sorted(unmodelled))}" if unmodelled else ""
        inputs_rounded = (
            f"; the products of {', '.join(sorted(contracted))} from inputs rounded to {self.products.name}"
            if self.products is not None and contracted
            else ""
        )
        basis = _how(self.fmt, "its torch ops with sampled roundings", f"its own {self.fmt.name} result", sampled)
        tier = (model.with_worst_case(roundings, self.exact, self.fmt), basis + inputs_rounded + rounded_once)
        if self.stages is not None:  # kept only where asked: each stage's arrays are the output's size
            self.stages[stage] = tier
        return tier


def function_model(
    fn: Callable[..., Any],
    backend_name: str,
    inputs64: dict[str, np.ndarray],
    exact: Exact,
    fmt: FloatFormat,
    own: np.ndarray,
    products: FloatFormat | None = None,
    judged: Sequence[np.ndarray] = (),
    stages: Stages | None = None,
) -> tuple[TypicalModel | None, str]:
    """The typical tier for a function, derived as typical.py derives it for registry ops: the
    scale per element is the larger of the RMS error of RANDOM_RUNS Monte Carlo runs of the
    function in `fmt` arithmetic and the error of one deterministic `fmt` run, against its
    float64 evaluation; TYPICAL_Z of it plus one ulp is flagged. A numpy function's runs are its
    formula emulated (accuracy.judge.emulation, deterministic run: round-to-nearest recursive sums); a
    torch function's are its ATen ops with sampled roundings (accuracy.judge.torch_emulation,
    deterministic run: its own `fmt` result; `products`: the format its contractions round their
    products' inputs to, TF32 for CUDA with TF32 on). None where the formula cannot be followed.
    `stages`, where given, receives a torch function's tier at each stage derived: what a cache
    keeps to give other outputs the tier this would give them (accuracy/workflows/model/unit_cache.py)."""
    if backend_name == "numpy":
        try:
            model = typical_model(fn, inputs64, exact, fmt, fmt)
        except Exception:
            model = None
        return model, (
            _how(fmt, "its formula emulated", "a round-to-nearest recursive run")
            if model
            else "the emulation cannot follow this numpy formula (it leaves numpy's ufuncs)"
        )
    return _torch_model(fn, inputs64, own, judged, _TorchDerivation(exact, fmt, products, stages))


def _torch_model(
    fn: Callable[..., Any],
    inputs64: dict[str, np.ndarray],
    own: np.ndarray,
    judged: Sequence[np.ndarray],
    derive: _TorchDerivation,
) -> tuple[TypicalModel | None, str]:
    """A torch function's tier: the first-order spread where every rounding reaches the output
    along one linear path, else Monte Carlo runs in stages until the outputs to judge settle."""
    from accuracy.judge.torch_emulation import MonteCarloRuns, first_order_spread  # torch only where needed

    exact, fmt = derive.exact, derive.fmt
    failed = "torch's Monte Carlo mode cannot run this function"
    try:  # exact where each rounding reaches the output along one linear path: no runs needed
        rms, unmodelled, contracted, roundings = first_order_spread(fn, inputs64, fmt, derive.products)
        model = model_from_rms(rms, own, exact, fmt, fmt.name) if np.shape(rms) == exact.shape else None
    except Exception:  # NotFirstOrder, or an op the propagation cannot follow: the runs can
        model = None
    if model is not None:
        sampled = f"first-order RMS error of its sampled roundings (what {RANDOM_RUNS} Monte Carlo runs estimate)"
        return derive.finished(0, model, sampled, unmodelled, contracted, roundings)
    runs = MonteCarloRuns(fn, inputs64, fmt, derive.products)
    errors = judged_errors(judged, exact, fmt)
    done = 0
    for stage in run_stages(judged):
        try:
            runs.extend([[SEED, i] for i in range(done, stage)])
        except Exception:
            return None, failed
        done = stage
        if any(np.shape(run) != exact.shape for run in runs.results):
            return None, failed
        model = model_from_runs(runs.results, own, exact, fmt, fmt.name)
        sampled = f"RMS error of {done} Monte Carlo runs"
        result = derive.finished(stage, model, sampled, set(runs.unmodelled), set(runs.contracted), runs.roundings)
        if settled(model, errors, stage):
            break  # settled: every output within rounding, as the 64 runs would judge it
    return result


def function_evidence(
    fn: Callable[..., Any],
    name: str,
    backend_name: str,
    rounded: dict[str, np.ndarray],
    fmt: FloatFormat,
    own: np.ndarray,
    reference: np.ndarray,
    products: FloatFormat | None = None,
    judged: Sequence[np.ndarray] = (),
    stages: Stages | None = None,
) -> Evidence:
    """The evidence to judge outputs of `fn` on `rounded` by: its float64 evaluation `reference`
    as the exact value, and the typical tier of its runs (`own`: its result at `fmt`). `judged`:
    the outputs it will judge, where known, so that the Monte Carlo runs stop as soon as their
    verdicts are settled (RUN_STAGES); `stages`: as `function_model` fills it."""
    exact = Exact.from_float64(reference)
    inputs64 = {k: np.asarray(v).astype(np.float64) for k, v in rounded.items()}
    model, basis = function_model(fn, backend_name, inputs64, exact, fmt, own, products, judged, stages)
    return Evidence(FunctionSubject(name, model, basis), rounded, fmt, exact)
