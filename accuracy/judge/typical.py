"""The typical-error tier: is an error consistent with what a correct algorithm makes *here*?

Worst-case bounds (gamma_n |A||B|) are thousands of times larger than the error of any correct
algorithm, so a lost term or a float16 accumulator stays inside them. This tier measures, on
the same rounded inputs, the error of the least accurate correct algorithm at the compute
precision — the op's own formula with plain recursive summation — and flags an error more
than TYPICAL_Z times that scale (plus one ulp of the stored format, the final rounding).

The scale per output element is the larger of
- the RMS error of RANDOM_RUNS Monte Carlo runs of the recursive algorithm (emulate, mode
  "random": independent rounding errors, the model of Higham & Mary's probabilistic analysis,
  here evaluated on the data's own partial sums instead of bounded by sum|x|), and
- the actual error of one deterministic round-to-nearest recursive run, which also covers
  data whose rounding errors do not average out (repeated values, integers).

TYPICAL_Z was chosen by measurement (`opbench selftest`, docs/verdicts.md): the largest error of any
correct implementation in the catalog is below it, and every mutant at 16x the least accurate
correct algorithm's error is above it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from accuracy.core.dtypes import FloatFormat, ulp
from accuracy.judge import kernels
from accuracy.judge.emulation import emulate
from accuracy.judge.error_metrics import rounding_error
from accuracy.reference import cache as refcache
from accuracy.reference.exact import Exact

TYPICAL_Z = 12.0
# The worst case of a unit's roundings, first order: its error is sum_i c_i d_i over N roundings,
# each |d_i| <= its half-width w_i with the runs' RMS w_i/sqrt(3) (uniform), so by Cauchy-Schwarz
# |error| <= sqrt(3 N) * RMS. The runs estimate the RMS from 64 samples (below half the true value
# with probability < 1e-9); WORST_MARGIN covers that (docs/verdicts.md, "The typical tier's worst case").
WORST_MARGIN = 2.0
RANDOM_RUNS = 64
# A function's Monte Carlo runs, taken in stages where the outputs to judge are known: k of the 64
# runs hold k/64 of the 64 runs' mean square error at least, so their RMS is at least sqrt(k/64)
# of it and a threshold from k runs at most sqrt(64/k) times the 64 runs' (the deterministic run
# and the ulp only raise both). An output below sqrt(k/64) of the k-run threshold is therefore
# within the 64-run one: every verdict is the 64 runs' verdict, and correct ports, far below their
# thresholds, mostly stop at 8 runs (docs/verdicts.md, "Monte Carlo runs in stages").
RUN_STAGES = (8, 16, 32, RANDOM_RUNS)
SEED = 20190  # Monte Carlo runs are seeded: the same inputs give bitwise the same verdict
MODEL_VERSION = 8  # bump when the emulation or the threshold changes: cached models are keyed by it


@dataclass(frozen=True)
class TypicalModel:
    """Per element: the error scale of a correct algorithm and the threshold the tier flags."""

    scale: np.ndarray  # absolute error scale of the least accurate correct algorithm
    threshold: np.ndarray  # TYPICAL_Z * scale + one ulp of the stored format
    compute: str
    # the most any rounding of its ops can give, per element (None: the roundings were not counted)
    worst_case: np.ndarray | None = None
    roundings: int | None = None  # how many sampled roundings worst_case is over

    def with_worst_case(self, roundings: int, exact: Exact, storage: FloatFormat) -> TypicalModel:
        """This model with its first-order worst case over `roundings` sampled roundings."""
        with np.errstate(over="ignore", invalid="ignore"):
            worst = WORST_MARGIN * np.sqrt(3.0 * max(roundings, 1)) * self.scale + ulp(exact.hi, storage)
        return TypicalModel(self.scale, self.threshold, self.compute, worst, roundings)

    def ratio(self, abs_error: np.ndarray) -> float:
        """max |error| / threshold over finite elements: > 1 is atypically large."""
        ok = np.isfinite(abs_error) & np.isfinite(self.threshold)
        if not ok.any():
            return 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(abs_error[ok] == 0, 0.0, abs_error[ok] / self.threshold[ok])
        return float(np.max(r))

    def threshold_ulps(self, exact: Exact, storage: FloatFormat) -> tuple[float, float]:
        """(median, smallest) over elements of the error in ulps the tier flags."""
        with np.errstate(over="ignore", invalid="ignore"):
            t = self.threshold / ulp(exact.hi, storage)
        t = t[np.isfinite(t)]
        return (float(np.median(t)), float(np.min(t))) if t.size else (float("inf"), float("inf"))


def _error(result: ArrayLike, exact: Exact) -> np.ndarray:
    r = np.asarray(result, dtype=np.longdouble)
    with np.errstate(invalid="ignore"):  # inf - inf where a run and the reference share an inf
        difference = np.subtract(r, exact.hi)
        difference -= exact.lo
        return np.abs(difference.astype(np.float64))


def model_from_runs(
    random_runs: list[np.ndarray],
    deterministic: np.ndarray | None,
    exact: Exact,
    storage: FloatFormat,
    compute: str,
    normwise_axes: tuple[int, ...] = (),
) -> TypicalModel:
    """The tier from a correct working-precision algorithm's runs on these inputs: the scale is
    the larger of the Monte Carlo runs' RMS error and the deterministic run's error (None: none),
    pooled (RMS) over `normwise_axes`; TYPICAL_Z of it plus one ulp of storage is flagged."""
    rms = np.sqrt(np.mean(np.square([_error(run, exact) for run in random_runs]), axis=0))
    return model_from_rms(rms, deterministic, exact, storage, compute, normwise_axes)


def model_from_rms(
    rms: np.ndarray,
    deterministic: np.ndarray | None,
    exact: Exact,
    storage: FloatFormat,
    compute: str,
    normwise_axes: tuple[int, ...] = (),
) -> TypicalModel:
    """The tier from the RMS error per element of a correct working-precision algorithm's
    roundings (the runs' estimate, or its first-order value), as `model_from_runs`."""
    scale = rms if deterministic is None else np.maximum(rms, _error(deterministic, exact))
    if normwise_axes:
        scale = np.broadcast_to(np.sqrt(np.mean(np.square(scale), axis=normwise_axes, keepdims=True)), scale.shape)
    return model_from_scale(_at_kinks(scale, exact), exact, storage, compute)


def _at_kinks(scale: np.ndarray, exact: Exact) -> np.ndarray:
    """The scale with a floor where the exact value is 0, a relu's (or a mask's) zero: there a
    correct run errs only where upstream rounding carries the element across the kink, which few
    of its runs show (all 64 runs can read 0 where one port in a thousand elements crosses), so
    the element's own RMS understates the crossings a correct port makes. Their size is the error
    of the value before the kink, which is the size of the tensor's other errors: the floor is
    the median scale of the elements whose exact value is not 0 (docs/verdicts.md, "At a kink")."""
    zero = (exact.hi == 0) & (exact.lo == 0)
    others = scale[~zero & np.isfinite(scale)]
    if not zero.any() or not others.size:
        return scale
    return np.where(zero, np.maximum(scale, np.median(others)), scale)


def model_from_scale(scale: np.ndarray, exact: Exact, storage: FloatFormat, compute: str) -> TypicalModel:
    """The tier from its error scale per element (none where the reference is not finite):
    TYPICAL_Z of it plus one ulp of storage is flagged. A stored model keeps its scale alone and
    is rebuilt by this, bit for bit."""
    scale = np.where(np.isfinite(exact.hi), scale, np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        threshold = TYPICAL_Z * scale + ulp(exact.hi, storage)
    return TypicalModel(scale, threshold, compute)


@dataclass
class TakenRuns:
    """The runs of one formula on one input set taken so far: a later stage adds to them, on the
    same memo (its products' moments), and the deterministic run is taken once."""

    memo: dict[Hashable, Any] = field(default_factory=dict)
    random: list[np.ndarray] = field(default_factory=list)
    nearest: np.ndarray | None = None


def typical_model(
    fp64_formula: Callable[..., Any],
    inputs64: dict[str, np.ndarray],
    exact: Exact,
    storage: FloatFormat,
    compute: FloatFormat,
    normwise_axes: tuple[int, ...] = (),
    runs: int = RANDOM_RUNS,
    taken: TakenRuns | None = None,
) -> TypicalModel | None:
    """The tier on these inputs from the op's formula emulated at `compute` in `runs` Monte Carlo
    runs (the first `runs` of the 64: each run draws from its own seed), or None where the formula
    cannot be emulated. `taken`: the runs of an earlier stage, extended here."""
    taken = TakenRuns() if taken is None else taken
    for i in range(len(taken.random), runs):
        out = emulate(
            fp64_formula,
            inputs64,
            compute,
            "random",
            rng=np.random.default_rng([SEED, i]),
            memo=taken.memo,
            store=storage,
        )
        if out is None or np.shape(out) != exact.shape:
            return None
        taken.random.append(out)
    if taken.nearest is None:
        taken.nearest = emulate(fp64_formula, inputs64, compute, "nearest", store=storage)
    return model_from_runs(taken.random[:runs], taken.nearest, exact, storage, compute.name, normwise_axes)


def judged_errors(judged: Sequence[np.ndarray], exact: Exact, fmt: FloatFormat) -> list[np.ndarray]:
    """The rounding errors of the outputs to judge, computed once for every stage's `settled`."""
    return [rounding_error(o, exact, fmt) for o in judged]


def settled(model: TypicalModel, errors: Sequence[np.ndarray], runs: int) -> bool:
    """Whether every output whose rounding errors are `errors` is within rounding by the model of
    `runs` runs as the 64 runs would judge it: below sqrt(runs/64) of its threshold (RUN_STAGES)."""
    return all(model.ratio(err) < np.sqrt(runs / RANDOM_RUNS) for err in errors)


class _NotEmulable(Exception):
    pass


def _stage_model(
    op: Any, inputs64: dict[str, np.ndarray], exact: Exact, storage: FloatFormat, compute: FloatFormat, runs: int,
    taken: TakenRuns,
) -> TypicalModel | None:  # fmt: skip
    """The op's tier from its first `runs` runs, through the reference cache."""

    def compute_model() -> Exact:
        with kernels.inside(op.name):  # the op's kernel: the approximations its steps may use
            model = typical_model(op.working_formula, inputs64, exact, storage, compute, op.normwise_axes, runs, taken)
        if model is None:
            raise _NotEmulable
        return Exact(model.scale, model.threshold)

    name = f"{op.name}:typical{MODEL_VERSION}:z{TYPICAL_Z:g}:{compute.name}:kernels-{kernels.key()}"
    name += "" if runs == RANDOM_RUNS else f":runs{runs}"
    try:
        stored = refcache.cached(refcache.cache_key(name, op.version, storage.name, inputs64), compute_model)
    except _NotEmulable:
        return None
    return TypicalModel(stored.hi, stored.lo, compute.name)


def cached_typical_model(
    op: Any, inputs64: dict[str, np.ndarray], exact: Exact, storage: FloatFormat, compute: FloatFormat
) -> TypicalModel | None:
    """typical_model through the reference cache: asv measures each implementation in its own
    process, and the model (64 emulated runs) is the same for all of them."""
    return _stage_model(op, inputs64, exact, storage, compute, RANDOM_RUNS, TakenRuns())


class StagedTypicalModel:
    """An op's tier on one input set with its Monte Carlo runs taken in stages (RUN_STAGES) until
    the outputs judged settle, as a model unit's function tier takes them: every verdict is the
    64 runs' verdict, and a correct port's linear layer costs 8 runs, not 64 (issue 59). The stage
    reached only rises, so the outputs judged after the first are judged by one model where they
    settle there. Each stage's model is kept in the reference cache; the 64 runs' is
    cached_typical_model's own."""

    def __init__(
        self, op: Any, inputs64: dict[str, np.ndarray], exact: Exact, storage: FloatFormat, compute: FloatFormat
    ):
        self._case = (op, inputs64, exact, storage, compute)
        self._taken = TakenRuns()
        self._stage = 0  # the index in RUN_STAGES reached
        self._models: dict[int, TypicalModel | None] = {}

    def settled_for(self, errors: Sequence[np.ndarray]) -> TypicalModel | None:
        """The model of the first stage (from the one reached) at which every output with these
        rounding errors settles, or the 64 runs' model; None where the formula cannot be emulated."""
        for index in range(self._stage, len(RUN_STAGES)):
            runs = RUN_STAGES[index]
            if runs not in self._models:
                self._models[runs] = _stage_model(*self._case, runs, self._taken)
            model = self._models[runs]
            if model is None or runs == RANDOM_RUNS or settled(model, errors, runs):
                self._stage = index
                return model
        raise AssertionError("RUN_STAGES ends at RANDOM_RUNS")
