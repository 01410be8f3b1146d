"""Why a unit is not within rounding: a catalogue of known port bugs, each a hypothesis tested
with the one judge.

A cause *explains* a unit when the reference unit with the change applied (an epsilon fitted,
the tanh GELU, weights stored in bfloat16, ...) puts the port's output within rounding on the
same inputs, and the unchanged reference does not (the unit is flagged). Causes are tried only
for flagged units. Each applicable cause's changed reference is computed in float64 (a fitted
parameter found by a 1-D search of the float64 difference on a log scale) and only those nearer
the port's output than the unchanged reference are judged, nearest first, until one explains and
the ones about as near (equal explanations, said both). A package adds causes through the
`opbench.causes` entry point (a module exporting `CAUSES`, a list of `Cause`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.core.errors import first_line
from accuracy.core.plugins import load_plugins
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.model.causes import (
    attention,
    families,
    inputs,
    layout,
    nonlinearities,
    normalization,
    parameters,
    precision,
)
from accuracy.workflows.model.causes.cause import Cause, Context
from accuracy.workflows.model.causes.positional import Shape, positional_shape
from accuracy.workflows.model.unit import CauseFinding, NamedCause, SkippedCause, Unit
from accuracy.workflows.model.units import float64_reference, judge_unit, nonfinite_mismatches, relative

# explanations this much farther (float64) than the first that explains are not judged; the few
# judged where none explains, to name the nearest
EQUALLY_NEAR = 4.0
MOST_JUDGED = 3

# the catalogue, one module per subject, cheapest causes first within each
CATALOGUE = (normalization, nonlinearities, parameters, layout, precision, inputs, attention, families)
# (port label, unit key) -> the seconds `explain` took there, while `timed_explanations` is open
_timings: dict[tuple[str, str], float] | None = None


@contextlib.contextmanager
def timed_explanations() -> Iterator[dict[tuple[str, str], float]]:
    """The seconds each `explain` call takes inside, by (port label, unit key): what naming a cause
    adds to a sweep, measured on the sweep's own calls (the self-test of causes reports it)."""
    global _timings
    outer, _timings = _timings, {}
    try:
        yield _timings
    finally:
        _timings = outer


def _timed(explain: Callable[..., CauseFinding]) -> Callable[..., CauseFinding]:
    """`explain`, timed by (port label, unit key) where `timed_explanations` is open."""

    @functools.wraps(explain)
    def timed(unit: Unit, tensors: list, fmt: FloatFormat, label: str, *rest: Any) -> CauseFinding:
        started = time.perf_counter()
        try:
            return explain(unit, tensors, fmt, label, *rest)
        finally:
            if _timings is not None:
                key = (label, unit.key)
                _timings[key] = _timings.get(key, 0.0) + time.perf_counter() - started

    return timed


@functools.cache
def causes() -> tuple[Cause, ...]:
    """The catalogue, then the causes installed packages add."""
    return (*(c for module in CATALOGUE for c in module.CAUSES), *load_plugins("opbench.causes", "CAUSES", Cause))


def _fitted(cause: Cause, unit: Unit, tensors: list, fmt: FloatFormat, output: np.ndarray, context: Context) -> Any:
    """The parameter value whose changed reference is nearest the port's output (float64, log scale)."""
    from scipy.optimize import minimize_scalar

    low, high = cause.values(unit.calls[0].module)  # type: ignore[misc]
    model = _model_modules(unit, context)

    def distance(log_value: float) -> float:
        changed = _changed(unit, cause, float(10.0**log_value), context)
        return relative(output, float64_reference(changed, tensors, fmt, throwaway=model))

    grid = np.linspace(np.log10(low), np.log10(high), 25)
    best = grid[int(np.argmin([distance(g) for g in grid]))]
    step = grid[1] - grid[0]
    found = float(10.0 ** minimize_scalar(distance, bounds=(best - step, best + step), method="bounded").x)
    # the value a port was written with is a round number (0.2, 1e-3): the nearest of the fit's roundings
    candidates = {found, *(float(f"{found:.{digits}g}") for digits in (1, 2, 3))}
    return min(candidates, key=lambda v: distance(float(np.log10(v))))


def _chosen(cause: Cause, unit: Unit, tensors: list, fmt: FloatFormat, output: np.ndarray, context: Context) -> Any:
    """The candidate whose changed reference is nearest the port's output (float64); None: none applies."""
    candidates = list(cause.choices(unit.calls[0].module, context))  # type: ignore[misc]
    if not candidates:
        return None
    model = _model_modules(unit, context)
    distances = [
        relative(output, float64_reference(_changed(unit, cause, c, context), tensors, fmt, throwaway=model))
        for c in candidates
    ]
    return candidates[int(np.nanargmin(np.asarray(distances, dtype=np.float64)))]


def _model_modules(unit: Unit, context: Context) -> set[int]:
    """The ids of the modules a changed copy must not be rounded in place if it holds one: the
    unit's own and the model's around it (a change that reuses one of them is copied again)."""
    return {id(m) for c in unit.calls for m in c.module.modules()} | {id(m) for m in context.modules.values()}


Distance = tuple[float, float]


def _distance(output: np.ndarray, reference: np.ndarray) -> Distance:
    """How far `reference` is from the port's output: first the elements where one is inf or NaN
    and the other is not the same (the padded rows a mask's fill decides: `relative` leaves them
    out), then the normwise relative difference of the rest; another shape is farthest."""
    found = relative(output, reference)
    if found != found:
        return (float("inf"), float("inf"))
    return (float(nonfinite_mismatches(output, reference)), found)


def _farther(distance: Distance, than: Distance) -> bool:
    """More elements of another kind (inf, NaN, finite), or EQUALLY_NEAR times farther on the rest."""
    return distance[0] > than[0] or distance[1] > EQUALLY_NEAR * than[1]


def _changed(unit: Unit, cause: Cause, value: Any, context: Context) -> Unit:
    call = unit.calls[0]
    return Unit([dataclasses.replace(call, module=cause.changed(call.module, value, context))])


Candidate = tuple[Distance, int, Cause, Any, Unit]


def _candidates(
    unit: Unit, tensors: list, fmt: FloatFormat, output: np.ndarray, context: Context
) -> tuple[list[Candidate], list[SkippedCause]]:
    """Each applicable cause's changed reference, fitted, and its float64 distance from the port's
    output; and the causes skipped, with why (a change the module cannot take, or an error whose
    shape along the sequence the cause does not give)."""
    module, shape = unit.calls[0].module, context.positions
    candidates: list[Candidate] = []
    skipped: list[SkippedCause] = []  # causes that could not apply to this module, and why
    for index, cause in enumerate(causes()):
        try:
            if not cause.applies(module):
                continue
            excluded = shape.excludes(cause) if shape else None
            if excluded:
                skipped.append(SkippedCause(cause.name, excluded))
                continue
            if cause.fit:
                value = cause.fit(module, tensors, output)
            elif cause.values:
                value = _fitted(cause, unit, tensors, fmt, output, context)
            elif cause.choices:
                value = _chosen(cause, unit, tensors, fmt, output, context)
                if value is None:
                    continue
            else:
                value = None
            changed = _changed(unit, cause, value, context)
            distance = _distance(output, float64_reference(changed, tensors, fmt))
            cause.words(module, value)  # words this module cannot take: not this cause either
        except Exception as error:  # a change this module cannot take: not this cause
            skipped.append(SkippedCause(cause.name, first_line(error, typed=True)))
            continue
        candidates.append((distance, index, cause, value, changed))
    return candidates, skipped


@_timed
def explain(
    unit: Unit,
    tensors: list,
    fmt: FloatFormat,
    label: str,
    output: np.ndarray,
    products: FloatFormat | None,
    context: Context | None = None,
) -> CauseFinding:
    """The cause that explains a flagged one-module unit, with its fitted parameters, ratio and the
    other causes that explain it too; or the nearest, `explains` False (`words` None where no cause
    of the catalogue applies to it). `context`: the model around the unit, for the causes that
    read it (another layer's bias, the shape before a flatten)."""
    if len(unit.calls) != 1:
        return CauseFinding()
    module = unit.calls[0].module
    context = context or Context(call=unit.calls[0])
    # each applicable cause's changed reference, fitted, in float64 (cheap); judged (costly) only
    # where it is nearer the port's output than the unchanged reference, nearest first
    try:
        reference = float64_reference(unit, tensors, fmt)
        unchanged = _distance(output, reference)
    except Exception as error:  # the unit itself the float64 reference cannot take: no cause tried
        return CauseFinding(skipped=(SkippedCause("every cause", first_line(error, typed=True)),))
    # the error's shape along a token sequence: the entries whose bug gives it are tried first
    shape = positional_shape(output, reference, context.length, fmt, module)
    context = dataclasses.replace(context, positions=shape)
    candidates, skipped = _candidates(unit, tensors, fmt, output, context)
    candidates.sort(key=lambda c: (not _fits(shape, c[2]), c[0], c[1]))
    nearer = [c for c in candidates if c[0] < unchanged] or candidates[:1]  # none nearer: the nearest, judged
    tried: list[tuple[int, CauseFinding]] = []
    first_explaining: Distance | None = None
    for distance, index, cause, value, changed in nearer:
        if first_explaining is not None and _farther(distance, first_explaining):
            break
        if first_explaining is None and len(tried) == MOST_JUDGED:
            break
        try:
            judged = judge_unit(changed, tensors, fmt, {label: output}, products)[label]
        except Exception as error:  # a changed reference the judge cannot take: not this cause
            skipped.append(SkippedCause(cause.name, first_line(error, typed=True)))
            continue
        tried.append((index, _tried(cause, module, value, judged)))
        if tried[-1][1].explains and first_explaining is None:
            first_explaining = distance
    if not tried:
        return CauseFinding(skipped=tuple(skipped), positions=shape.as_dict() if shape else None)
    # equal explanations, those the error's shape points to first, then in the catalogue's order (cheapest first)
    catalogue = causes()
    explaining = sorted((t for t in tried if t[1].explains), key=lambda t: (not _fits(shape, catalogue[t[0]]), t[0]))
    index, best = (
        explaining[0]
        if explaining
        else min(tried, key=lambda t: float(t[1].ratio if t[1].ratio is not None else np.inf))
    )
    alternatives = tuple(NamedCause(t.name or "", t.words, t.parameters) for _, t in explaining[1:])
    positions = shape.as_dict(catalogue[index] if best.explains else None) if shape else None
    return dataclasses.replace(best, alternatives=alternatives, skipped=tuple(skipped), positions=positions)


def _tried(cause: Cause, module: Any, value: Any, judged: Any) -> CauseFinding:
    """A cause judged: its words, fitted parameter, verdict and ratio to its tier's limit."""
    numbers = judged.numbers
    ratio = next((numbers.get(k) for k in ("typical_ratio", "bound_ratio") if numbers.get(k) == numbers.get(k)), None)
    return CauseFinding(
        name=cause.name,
        words=cause.words(module, value),
        parameters={cause.parameter: value} if cause.parameter else {},
        verdict=judged.judgement.verdict,
        ratio=ratio,
        explains=judged.judgement.verdict == WITHIN,
    )


def _fits(shape: Shape | None, cause: Cause) -> bool:
    return shape is not None and shape.fits(cause)
