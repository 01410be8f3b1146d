"""Verdicts: is this output rounding, or not? Four answers, each with a one-line reason.

- `within rounding`: inside the worst-case bound at the implementation's compute precision
  *and* consistent with the error a correct algorithm makes on these inputs (the typical tier,
  an elementwise contract, or LAPACK's backward-error test);
- `suspicious`: inside the worst-case bound but atypically large;
- `beyond rounding`: outside the worst-case bound, outside the contract, non-finite where the
  exact value is finite, or a declared semantic variant (it computes something else);
- `undetermined`: no valid worst-case bound at this size and precision;
- `runtime limit` (model units only): not within rounding, but within it once a declared finding
  of the runtime that computed it is modelled (accuracy.catalog.runtime_limits): the runtime's
  known limit, not the port's bug;
- `within quantization noise` (a quantized port's units and output): its error is the noise of
  the quantize points the port declared (accuracy.judge.quantization), not rounding's.

`Evidence.judge` is the one judge, whatever the subject: a registry op (the registry's generated
cases, `check OP` on a user's arrays, a model unit that is a registry op), a function with no
worst-case bound (`check --fn`, any other model unit: the typical tier of its own runs), or an
exact lookup (a model unit with integer inputs only). Where no verdict is given, the outcome says
why: `not compared` or `error`. A result equal to the exact value rounded to its format
(+-inf on overflow, 0 or a subnormal on underflow) has error 0, whatever the tier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from accuracy.core.dtypes import FloatFormat, ulp
from accuracy.judge import backward_error as backward
from accuracy.judge import contracts
from accuracy.judge.error_metrics import correctly_rounded, error_over_bound, rounding_error
from accuracy.judge.precision import compute_format, model_bound, scaled_unit_roundoff
from accuracy.judge.typical import (
    WORST_MARGIN,
    StagedTypicalModel,
    TypicalModel,
    cached_typical_model,
    judged_errors,
)
from accuracy.reference.exact import Exact


class Verdict(StrEnum):
    """The one verdict type. A StrEnum, so a verdict prints, compares and is saved (JSON, asv
    results, the report) as exactly the words users read; its position is the asv tier."""

    WITHIN = "within rounding"
    SUSPICIOUS = "suspicious"
    BEYOND = "beyond rounding"
    UNDETERMINED = "undetermined"
    RUNTIME_LIMIT = "runtime limit"
    WITHIN_NOISE = "within quantization noise"

    @property
    def tier(self) -> int:
        """The asv track's number for this verdict (lower is better)."""
        return VERDICTS.index(self)

    @classmethod
    def of_tier(cls, tier: float) -> Verdict:
        return VERDICTS[int(tier)]


WITHIN, SUSPICIOUS, BEYOND, UNDETERMINED, RUNTIME_LIMIT, WITHIN_NOISE = Verdict
VERDICTS = tuple(Verdict)  # the index is the asv tier (lower is better)
OP_VERDICTS = (WITHIN, SUSPICIOUS, BEYOND, UNDETERMINED)  # what an op's output gets: the asv tracks' tiers
NAN = float("nan")


class Unjudged(StrEnum):
    """Outcomes that are not verdicts: a unit no port output could be compared for, an
    implementation that failed to run, a stored result with no verdict track (it failed, or
    predates it). Never counted as within rounding."""

    NOT_COMPARED = "not compared"
    ERROR = "error"
    NO_VERDICT = "no verdict"


NOT_COMPARED, ERROR, NO_VERDICT = Unjudged
Outcome = Verdict | Unjudged


@dataclass(frozen=True)
class FunctionSubject:
    """A function no registry op describes (a user's, a model unit's): no worst-case bound exists,
    so it is held to the typical tier of its own runs, `model` (None where its formula cannot be
    followed); `basis` says in words how that tier was derived."""

    name: str
    model: TypicalModel | None
    basis: str


@dataclass(frozen=True)
class ExactLookup:
    """A computation on integer inputs only (an embedding lookup): nothing rounds, so its output
    equals its float64 evaluation or it does not."""

    name: str


@dataclass(frozen=True)
class NonFiniteInputs:
    """Inputs with inf or NaN are data, not an error: the output elements that do not depend on
    them are judged against the exact reference of the inputs with those values set to 0; the
    elements that do (their float64 evaluation is not finite, or changes without them) must
    carry the float64 evaluation's own inf and NaN, and are not judged for rounding."""

    counts: dict[str, int]  # input name -> how many of its values are not finite
    depends: np.ndarray  # bool per output element
    evaluation: np.ndarray  # the float64 evaluation on the inputs as given

    @classmethod
    def of(cls, op: Any, inputs64: dict[str, np.ndarray]) -> tuple[NonFiniteInputs | None, dict[str, np.ndarray]]:
        """(where the inputs are not finite, or None; the inputs the exact reference is computed on)."""
        counts = {k: int(np.count_nonzero(~np.isfinite(v))) for k, v in inputs64.items()}
        if not any(counts.values()):
            return None, inputs64
        finite = {k: np.where(np.isfinite(v), v, 0.0) for k, v in inputs64.items()}
        with np.errstate(all="ignore"):
            given, without = np.asarray(op.fp64(**inputs64)), np.asarray(op.fp64(**finite))
        depends = ~np.isfinite(given) | (given != without)
        return cls({k: n for k, n in counts.items() if n}, depends, given), finite

    def inputs_text(self) -> str:
        return ", ".join(f"{k}: {n}" for k, n in self.counts.items())


def tier(verdict: str) -> int:
    return Verdict(verdict).tier


def bound_verdict(bound_ratio: float | None, nonfinite: int | None) -> Verdict:
    """What the worst-case bound alone decides, for records that keep nothing else (asv results
    from before the tier track): a non-finite result or error > bound is beyond rounding, a
    vacuous bound (NaN or missing ratio) undetermined, error <= bound within rounding. `judge`
    applies the same rule first; the typical tier and contracts need the output itself."""
    if nonfinite:
        return BEYOND
    if bound_ratio is None or math.isnan(bound_ratio):
        return UNDETERMINED
    return WITHIN if bound_ratio <= 1 else BEYOND


@dataclass(frozen=True)
class Judgement:
    """One output's verdict and the numbers behind it (ratios > 1 fail their tier)."""

    verdict: Verdict
    reason: str
    compute: str  # the precision the implementation computes in (storage if the same)
    bound_ratio: float = NAN  # max error / worst-case bound at the compute precision; NaN if vacuous
    typical_ratio: float = NAN  # max error / the typical tier's threshold; NaN where not modelled
    threshold_ulp: float = NAN  # the error (ulps, median element) the typical tier flags here
    sharpest_threshold_ulp: float = NAN  # ... at its sharpest element
    lapack_ratio: float = NAN  # LAPACK's test ratio (threshold 30) for linear algebra
    contract: str = ""  # the elementwise contract applied, e.g. "3 ulp (numpy ...)"
    semantics: str = ""  # a declared semantic variant, e.g. "ddof=0"
    worst: dict[str, Any] = field(default_factory=dict)

    @property
    def tier(self) -> int:
        return tier(self.verdict)

    @property
    def label(self) -> str:
        """The verdict as printed: a semantic variant names its semantics."""
        return f"{self.verdict} (semantics: {self.semantics})" if self.semantics else self.verdict

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tier": self.tier, "label": self.label}


def _fmt_ulps(v: float) -> str:
    return f"{v:.3g} ulp"


class Evidence:
    """Everything verdicts need about one input set, computed once and shared by every output
    judged on it (explain judges every implementation on the same inputs). `subject` is a registry
    op, a FunctionSubject or an ExactLookup; the last two come with their `exact` (float64) value."""

    def __init__(
        self,
        subject: Any,
        inputs: dict[str, np.ndarray],
        fmt: FloatFormat,
        exact: Exact | None = None,
        judged: Sequence[np.ndarray] | None = None,
    ):
        """`judged`: the outputs this evidence will judge, where known (a model unit's ports'):
        the typical tier's Monte Carlo runs are then taken in stages that stop once they settle."""
        self.op = subject
        self.fmt = fmt
        self.inputs64 = {k: np.asarray(v).astype(np.float64) for k, v in inputs.items()}
        self.nonfinite: NonFiniteInputs | None = None
        if exact is None:  # a registry op: its exact reference needs finite inputs
            self.nonfinite, self.inputs64 = NonFiniteInputs.of(subject, self.inputs64)
        self.exact = exact if exact is not None else subject.exact(self.inputs64, fmt)
        self._bounds: dict[str, Any] = {}  # bounds by compute format, and "growth"
        self._typical: dict[str, TypicalModel | None] = {}
        self._staged: dict[str, StagedTypicalModel] = {}
        self.ulp = ulp(self.exact.hi, fmt)
        shaped = [np.asarray(o) for o in judged or ()]
        self._judged = (
            [o.reshape(self.exact.shape) for o in shaped]
            if judged is not None and self.nonfinite is None and all(o.size == self.exact.hi.size for o in shaped)
            else None
        )

    def growth(self) -> float:
        """GEPP's growth for LU-based ops (1 elsewhere)."""
        if "growth" not in self._bounds:
            a = self.inputs64.get("a")
            self._bounds["growth"] = (
                backward.lu_growth(a) if self.op.name in backward.LU_BASED and a is not None else 1.0
            )
        return self._bounds["growth"]

    def bound(self, compute: FloatFormat) -> np.ndarray:
        if compute.name not in self._bounds:
            algorithm = scaled_unit_roundoff(compute, self.growth()) if self.growth() > 1 else compute
            self._bounds[compute.name] = model_bound(self.op, self.inputs64, self.exact, self.fmt, algorithm)
        return self._bounds[compute.name]

    def bound_for(self, impl: Any) -> tuple[FloatFormat, np.ndarray]:
        """The precision `impl` computes in and its bound there (the precision model): what the
        verdict, explain's bound ratio and the asv track all use."""
        compute = compute_format(impl, self.fmt, self.op.family)
        return compute, self.bound(compute)

    def typical(self, compute: FloatFormat, err: np.ndarray | None = None) -> TypicalModel | None:
        """The op's typical tier at `compute`: where the outputs judged are known, the model of
        the stage at which they and `err` (the rounding errors of the output judged now) settle."""
        if self._judged is None or err is None:
            if compute.name not in self._typical:
                self._typical[compute.name] = cached_typical_model(
                    self.op, self.inputs64, self.exact, self.fmt, compute
                )
            return self._typical[compute.name]
        if compute.name not in self._staged:
            staged = StagedTypicalModel(self.op, self.inputs64, self.exact, self.fmt, compute)
            staged.settled_for(judged_errors(self._judged, self.exact, self.fmt))
            self._staged[compute.name] = staged
        return self._staged[compute.name].settled_for([err])

    def worst(self, output: np.ndarray, err: np.ndarray, per_element_limit: ArrayLike) -> dict[str, Any]:
        """The element that decided: largest error relative to what its tier allows there."""
        with np.errstate(all="ignore"):
            score = np.where(err == 0, 0.0, err / per_element_limit)
        score = np.where(np.isnan(score), err, score)
        if score.size == 0:
            return {}
        flat = int(np.argmax(score))
        index = np.unravel_index(flat, err.shape) if err.ndim else ()
        out = np.asarray(output).astype(np.float64)
        worst = {
            "index": [int(i) for i in index],
            "result": float(out[index]),
            "exact": float(self.exact.hi[index]) + float(self.exact.lo[index]),
            "error_ulp": float(err[index] / self.ulp[index]),
            "allowed_ulp": float(np.broadcast_to(per_element_limit, err.shape)[index] / self.ulp[index]),
        }
        elementwise = {k: float(v[index]) for k, v in self.inputs64.items() if v.shape == err.shape}
        if elementwise:
            worst["inputs"] = elementwise
        return worst

    def judge(
        self,
        output: np.ndarray,
        impl: Any = None,
        contract: contracts.Contract | None = None,
        compute: FloatFormat | None = None,
    ) -> Judgement:
        """The verdict on `output` (in the case's format) as computed by `impl` (None: unknown);
        `contract` holds it to a stated ulp contract instead of the one `impl` publishes, and
        `compute` to a precision known from outside (a model port run with TF32 on)."""
        output = np.asarray(output)
        if self.nonfinite is None or output.shape != self.nonfinite.depends.shape:
            return self._judge(output, (impl, contract, compute))
        nf = self.nonfinite
        rounded = correctly_rounded(self.exact, self.fmt).astype(output.dtype)
        judged = self._judge(np.where(nf.depends, rounded, output), (impl, contract, compute))
        given, out = nf.evaluation, output.astype(np.float64)
        same = (out == given) | (np.isnan(out) & np.isnan(given))
        missing = int(np.count_nonzero(nf.depends & ~np.isfinite(given) & ~same))
        finite = int(np.count_nonzero(nf.depends & np.isfinite(given)))
        depends = int(np.count_nonzero(nf.depends))
        where = f"{depends} output element(s) depend on non-finite inputs ({nf.inputs_text()})"
        if missing:
            return replace(
                judged,
                verdict=BEYOND,
                reason=f"{where}: {missing} of them are not the inf or NaN of the float64 evaluation there; "
                f"the other elements: {judged.verdict}: {judged.reason}",
            )
        unjudged = f", {finite} finite one(s) not judged for rounding" if finite else ""
        return replace(
            judged,
            reason=f"{judged.reason}; {where}: they carry the float64 evaluation's inf and NaN{unjudged}",
        )

    def _judge(self, output: np.ndarray, claim: tuple[Any, contracts.Contract | None, FloatFormat | None]) -> Judgement:
        """`judge` on finite inputs; `claim`: (impl, contract, compute) as `judge` takes them."""
        impl, contract, compute = claim
        if isinstance(self.op, FunctionSubject):
            return self._by_function(output, self.op)
        if isinstance(self.op, ExactLookup):
            return self._by_lookup(output)
        if output.shape != self.exact.shape:
            raise ValueError(f"output has shape {output.shape} but the {self.op.name} reference has {self.exact.shape}")
        if hasattr(impl, "at"):  # a registry Impl: its declarations at this dtype (Impl.per_dtype)
            impl = impl.at(self.fmt.name)
        compute, bound = (compute, self.bound(compute)) if compute is not None else self.bound_for(impl)
        semantics = getattr(impl, "semantics", "") or ""
        err = rounding_error(output, self.exact, self.fmt)
        vacuous = not np.all(np.isfinite(bound))
        ratio_to_bound = error_over_bound(err, bound)
        common: dict[str, Any] = {"compute": compute.name, "semantics": semantics, "bound_ratio": ratio_to_bound}
        nonfinite = int(np.count_nonzero(np.isinf(err)))

        if semantics:
            return Judgement(
                BEYOND,
                f"semantics: {semantics}: a different quantity than the reference computes, "
                "whatever the size of the difference",
                worst=self.worst(output, err, bound),
                **common,
            )
        if nonfinite:
            return Judgement(
                BEYOND,
                f"{nonfinite} non-finite result(s) where the correctly rounded value is finite",
                worst=self.worst(output, err, bound),
                **common,
            )

        contract = contract or contracts.contract_for(self.op.name, impl, self.fmt, compute)
        if contract is not None:
            return self._by_contract(output, err, contract, common)
        if not np.any(err):  # error 0 everywhere: every ratio is 0, whatever the bounds
            return Judgement(
                WITHIN,
                f"correctly rounded: every element is the exact value rounded to {self.fmt.name}",
                **common,
                typical_ratio=0.0,
            )
        by_bound = bound_verdict(ratio_to_bound, nonfinite)  # nonfinite is 0 and some error is not here
        if by_bound == BEYOND:
            return Judgement(
                BEYOND,
                f"error {ratio_to_bound:.3g}x the worst-case bound at {compute.name} ({self.op.bound_doc})",
                worst=self.worst(output, err, bound),
                **common,
            )
        ratio = backward.lapack_ratio(self.op.name, self.inputs64, output, self.exact, self.fmt.u, self.growth())
        if ratio is not None:  # backward error needs no forward bound: it judges kappa*eta >= 1 too
            return self._by_backward_error(output, err, bound, ratio, vacuous, common)
        if by_bound == UNDETERMINED:
            return Judgement(
                UNDETERMINED,
                f"no valid worst-case bound at {compute.name} for this size "
                f"({self.op.bound_doc} is infinite: n*u >= 1 or kappa*eta >= 1)",
                **common,
            )
        return self._by_typical(output, err, bound, compute, common)

    def _by_function(self, output: np.ndarray, subject: FunctionSubject) -> Judgement:
        fmt, exact, model = self.fmt, self.exact, subject.model
        err = rounding_error(output, exact, fmt)
        fields: dict[str, Any] = {
            "compute": fmt.name,
            "worst": self.worst(output, err, np.nan if model is None else model.threshold),
        }
        no_bound = "no worst-case bound exists for an arbitrary function"
        if fmt.name == "float64":
            return Judgement(
                UNDETERMINED,
                "the reference is the function evaluated in float64: no more precise than a float64 result "
                f"({no_bound})",
                **fields,
            )
        nonfinite = int(np.count_nonzero(np.isinf(err)))
        if nonfinite:
            return Judgement(
                BEYOND, f"{nonfinite} non-finite result(s) where the float64 evaluation is finite", **fields
            )
        if model is None:
            return Judgement(UNDETERMINED, f"typical tier not modelled: {subject.basis} ({no_bound})", **fields)
        ratio = model.ratio(err)
        median, sharpest = model.threshold_ulps(exact, fmt)
        fields |= {"typical_ratio": ratio, "threshold_ulp": median, "sharpest_threshold_ulp": sharpest}
        tier = f"{subject.basis} (flags errors >= {median:.3g} ulp here; {no_bound})"
        if model.worst_case is not None and ratio > 1:
            beyond = error_over_bound(err, model.worst_case)
            if beyond > 1:
                return Judgement(
                    BEYOND,
                    f"{beyond:.3g}x the most any rounding of its ops can give (first order, "
                    f"{WORST_MARGIN:g} sqrt(3 N) x the runs' RMS over its N sampled roundings): {tier}",
                    **fields,
                )
        if ratio > 1:
            return Judgement(SUSPICIOUS, f"{ratio:.3g}x the typical threshold: {tier}", **fields)
        return Judgement(WITHIN, f"typical of a correct {fmt.name} evaluation: {tier}", **fields)

    def _by_lookup(self, output: np.ndarray) -> Judgement:
        if np.array_equal(np.asarray(output, dtype=np.float64), self.exact.hi):
            return Judgement(WITHIN, "integer inputs only: equals its float64 evaluation", self.fmt.name)
        return Judgement(
            UNDETERMINED,
            "integer inputs only: differs from its float64 evaluation, and no typical tier models it",
            self.fmt.name,
        )

    def _by_contract(
        self, output: np.ndarray, err: np.ndarray, contract: contracts.Contract, common: dict[str, Any]
    ) -> Judgement:
        steps = contracts.ulps_from_correctly_rounded(output, correctly_rounded(self.exact, self.fmt), self.fmt)
        worst_steps = float(np.max(steps, initial=0.0))
        text = f"{contract.max_ulp} ulp ({contract.source})"
        limit = (contract.max_ulp + 0.5) * self.ulp
        fields = {**common, "contract": text, "worst": self.worst(output, err, limit)}
        if worst_steps > contract.max_ulp:
            return Judgement(
                BEYOND,
                f"{worst_steps:.0f} ulp from the correctly rounded value, outside its contract of {text}",
                **fields,
            )
        return Judgement(WITHIN, f"within its contract of {text}", **fields)

    def _by_backward_error(
        self,
        output: np.ndarray,
        err: np.ndarray,
        bound: np.ndarray,
        ratio: float,
        vacuous: bool,
        common: dict[str, Any],
    ) -> Judgement:
        doc = backward.RATIO_DOCS[self.op.name]
        fields = {**common, "lapack_ratio": ratio, "worst": self.worst(output, err, bound)}
        forward = "the forward bound is vacuous here (kappa*eta >= 1)" if vacuous else "inside the worst-case bound"
        if ratio > backward.LAPACK_THRESHOLD:
            return Judgement(
                SUSPICIOUS,
                f"LAPACK test ratio {ratio:.3g} > {backward.LAPACK_THRESHOLD:g} ({doc}): "
                f"not what a backward-stable algorithm gives; {forward}",
                **fields,
            )
        return Judgement(
            WITHIN,
            f"backward stable: LAPACK test ratio {ratio:.3g} <= {backward.LAPACK_THRESHOLD:g} ({doc}); {forward}",
            **fields,
        )

    def _by_typical(
        self, output: np.ndarray, err: np.ndarray, bound: np.ndarray, compute: FloatFormat, common: dict[str, Any]
    ) -> Judgement:
        model = self.typical(compute, err)
        if model is None:
            return Judgement(
                WITHIN,
                "inside the worst-case bound (typical tier not modelled: the op's formula leaves numpy's ufuncs)",
                worst=self.worst(output, err, bound),
                **common,
            )
        ratio = model.ratio(err)
        median, sharpest = model.threshold_ulps(self.exact, self.fmt)
        fields = {
            **common,
            "typical_ratio": ratio,
            "threshold_ulp": median,
            "sharpest_threshold_ulp": sharpest,
            "worst": self.worst(output, err, model.threshold),
        }
        flags = f"flags errors >= {_fmt_ulps(median)} here"
        if ratio > 1:
            return Judgement(
                SUSPICIOUS,
                f"inside the worst-case bound but {ratio:.3g}x the typical threshold: "
                f"a plain recursive {compute.name} algorithm errs far less on these inputs ({flags})",
                **fields,
            )
        return Judgement(
            WITHIN, f"inside the worst-case bound and typical of a correct {compute.name} algorithm ({flags})", **fields
        )


def pair_verdict(a: Judgement, b: Judgement) -> Verdict:
    """A pair of differing results is as good as its worse side; undetermined if either is."""
    if UNDETERMINED in (a.verdict, b.verdict):
        return UNDETERMINED
    return max(a.verdict, b.verdict, key=tier)


def judge(
    op: Any,
    inputs: dict[str, np.ndarray],
    output: np.ndarray,
    fmt: FloatFormat,
    impl: Any = None,
    exact: Exact | None = None,
) -> Judgement:
    """The verdict on any output of `op` for any inputs (rounded to `fmt`, fed to both the op
    and the reference); `impl` supplies the precision model, semantics and contract."""
    return Evidence(op, inputs, fmt, exact).judge(output, impl)
