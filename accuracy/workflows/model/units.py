"""Units: the leaf calls a port computes as one piece, and the one judge applied to them.

Every port's unit gets the reference model's own activations as inputs, rounded to the port's
dtype, and its output is judged by `Evidence.judge` (accuracy.judge.verdicts) against the exact
value of that unit on those inputs:
- a module the catalog declares as a registry op (accuracy.catalog.module_ops: nn.Linear, an
  eval-mode BatchNorm, a LayerNorm with the registry's eps, ...) by the op's bounds and tiers,
  held to the op's generic contract as `check OP` holds an output of unknown origin;
- anything else by the typical tier of `check --fn`: the unit evaluated in float64 with its
  parameters rounded to the port's dtype, and Monte Carlo runs of its torch ops;
- a unit with integer inputs only (an embedding lookup) by equality with its float64 evaluation.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import replace

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.backends.pytorch import torch_dtype
from accuracy.catalog.module_ops import module_op
from accuracy.catalog.registry import get_op
from accuracy.catalog.runtime_limits import limits_of
from accuracy.core.dtypes import FloatFormat
from accuracy.judge import function_tier, kernels, typical
from accuracy.judge.contracts import generic_contract
from accuracy.judge.error_metrics import rounding_error
from accuracy.judge.function_tier import Stages, function_evidence, judged_row
from accuracy.judge.verdicts import RUNTIME_LIMIT, WITHIN, Evidence, ExactLookup
from accuracy.reference.exact import Exact
from accuracy.workflows.model import state_key, trace, unit_cache
from accuracy.workflows.model.kinds import judged_as
from accuracy.workflows.model.state_key import source_digest
from accuracy.workflows.model.trace import converted, converted_in_place, float64_throughout, run_calls
from accuracy.workflows.model.unit import Unit, UnitJudgement
from accuracy.workflows.model.unit_cache import cached_function_evidence, unit_key

TYPICAL_TIER = "typical tier of check --fn"
LOOKUP_TIER = "exact (integer inputs)"


def _param(tensor, fmt: FloatFormat) -> np.ndarray:
    return to_numpy(tensor.detach().to(torch_dtype(fmt)))


def registry_case(unit: Unit, inputs: list[np.ndarray], fmt: FloatFormat):
    """(the module-op entry, the op's named inputs) where the unit is one module computing a registry op."""
    if len(unit.calls) != 1 or len(inputs) != 1:
        return None
    module, x = judged_as(unit.calls[0].module), inputs[0]  # a user's BatchNorm as torch's
    entry = module_op(module, x)
    if entry is None:
        return None
    named = {"x": entry.shaped(x)} | {name: _param(getattr(module, attr), fmt) for name, attr in entry.params.items()}
    return entry, named


def _modules(unit: Unit, fmt: FloatFormat, dtype, throwaway: set[int] | None = None) -> list:
    """Copies of the unit's modules, their parameters rounded to `fmt` (the port's own), then held
    in `dtype`: the copy is ours, so it is converted in place. With `throwaway` (float64_reference's),
    a module the caller will not use again is rounded where it is instead of copied, where it can be."""
    rounded = torch_dtype(fmt)
    return [
        c.module
        if throwaway is not None and converted_in_place(c.module, rounded, dtype, throwaway)
        else converted(c.module, rounded).to(dtype)
        for c in unit.calls
    ]


def unit_function(unit: Unit, fmt: FloatFormat, inputs: list):
    """The unit as a torch function of its floating inputs (in0, in1, ...), for check --fn: in
    the dtype it is called with, its parameters rounded to `fmt` (the port's own parameters)."""
    import torch

    cache: dict = {}

    def modules(dtype):
        if dtype not in cache:
            cache[dtype] = _modules(unit, fmt, dtype)
        return cache[dtype]

    fixed = [None if t.is_floating_point() else t for t in inputs]
    carried = None not in fixed  # integer inputs only: an empty in0 carries the dtype to compute in

    def layer(**named):
        if any(not isinstance(v, torch.Tensor) for v in named.values()):
            raise TypeError("a layer takes torch tensors")
        floats = iter(named[f"in{i}"] for i in range(len(named)))
        # copies: an in-place module (Hardswish(inplace=True)) must not overwrite its caller's inputs
        args = [(next(floats) if slot is None else slot).clone() for slot in fixed]
        dtype = named["in0"].dtype if carried else next(a.dtype for a in args if a.is_floating_point())
        if dtype != torch.float64:
            return run_calls(unit.calls, modules(dtype), args)
        with float64_throughout():  # the evaluation and Monte Carlo runs: its own casts stay float64
            return run_calls(unit.calls, modules(dtype), args)

    layer.__qualname__ = unit.key
    return layer


def relative(value, reference) -> float:
    """Normwise relative difference ||value - reference|| / ||reference|| (float64) over the
    elements finite in both: an inf or NaN where the reference has the same is no difference, and
    one where it has not is counted by `nonfinite_mismatches`."""
    v, r = np.asarray(value, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if v.shape != r.shape:
        return float("nan")
    both = np.isfinite(v) & np.isfinite(r)
    diff, norm = float(np.linalg.norm(v[both] - r[both])), float(np.linalg.norm(r[both]))
    if diff == 0:
        return 0.0
    return diff / norm if norm else float("inf")


def nonfinite_mismatches(value, reference) -> int:
    """Elements where value and reference are not the same inf or NaN while one of them is not finite."""
    v, r = np.asarray(value, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if v.shape != r.shape:
        return 0
    same = (v == r) | (np.isnan(v) & np.isnan(r))
    return int(np.count_nonzero(~(np.isfinite(v) & np.isfinite(r)) & ~same))


def float64_reference(unit: Unit, inputs: list, fmt: FloatFormat, throwaway: set[int] | None = None) -> np.ndarray:
    """The unit in float64 with its parameters rounded to `fmt`, on copies of `inputs` (XGLM's
    positional embedding adds its offset to the position ids it is given, in place).
    `throwaway`: the unit's modules are the caller's own copies, not used again, sharing no
    submodule with those whose ids it holds (the model's): rounded where they are, not copied."""
    import torch

    modules = _modules(unit, fmt, torch.float64, throwaway)
    copies = [t.to(torch.float64, copy=True) if t.is_floating_point() else t.clone() for t in inputs]
    with torch.no_grad(), float64_throughout():
        return to_numpy(run_calls(unit.calls, modules, copies))


def _evidence(unit: Unit, inputs: list, fmt: FloatFormat, products: FloatFormat | None, outputs: list):
    """(the evidence, the shape outputs are judged in, how: tier, registry op and the compute
    precision known from outside, the float64 reference) for this unit on `inputs` (torch tensors
    already in `fmt`); `outputs`: the ports' outputs it will judge (its Monte Carlo runs stop once
    their verdicts are settled)."""
    import torch

    arrays = [to_numpy(t) for t in inputs]
    floats = [a for a, t in zip(arrays, inputs, strict=True) if t.is_floating_point()]
    case = registry_case(unit, floats, fmt) if len(floats) == len(arrays) else None
    if case is not None:
        entry, named = case
        evidence = Evidence(get_op(entry.op), named, fmt, judged=outputs)
        compute = products if entry.contraction else None
        reference = float64_reference(unit, inputs, fmt)
        return evidence, evidence.exact.shape, (f"registry op {entry.op}", entry.op, compute), reference
    from accuracy.judge.torch_emulation import torch_ops_computed

    if not floats and not torch_ops_computed(lambda: float64_reference(unit, inputs, fmt), {}):
        reference = float64_reference(unit, inputs, fmt)
        evidence = Evidence(ExactLookup(unit.key), {}, fmt, Exact.from_float64(reference))
        return evidence, reference.shape, (LOOKUP_TIER, None, None), reference
    fn = unit_function(unit, fmt, inputs)
    # integer inputs into floating arithmetic (BERT's embeddings: lookups, adds, a norm): judged
    # like any unit, an empty floating input carrying the dtype its runs compute in
    tensors = [t for t in inputs if t.is_floating_point()] or [torch.zeros(0, dtype=torch_dtype(fmt))]
    floats = floats or [to_numpy(tensors[0])]
    with np.errstate(all="ignore"):
        # the float64 evaluation through `fn` itself: its float64 modules are built here, before
        # the Monte Carlo runs' dispatch mode, which would otherwise see (and round) their conversion
        reference = to_numpy(fn(**{f"in{i}": t.to(torch.float64) for i, t in enumerate(tensors)}))
    named = {f"in{i}": a for i, a in enumerate(floats)}
    judged = [np.asarray(o).reshape(reference.shape) for o in outputs]

    def computed(stages: Stages) -> Evidence:
        with np.errstate(all="ignore"):
            own = to_numpy(fn(**{f"in{i}": t for i, t in enumerate(tensors)}))
        return function_evidence(fn, unit.key, "torch", named, fmt, own, reference, products, judged, stages)

    # a rerun with another port reads the typical tier judged before on these inputs (unit_cache)
    key = unit_key(unit, inputs, fmt, products, reference, judge_code())
    evidence = cached_function_evidence(key, unit.key, named, fmt, Exact.from_float64(reference), judged, computed)
    return evidence, reference.shape, (TYPICAL_TIER, None, None), reference


@functools.cache
def judge_code() -> str:
    """The digest of the code that derives a unit's typical tier (the tier, the torch emulation and
    the kernels it models, the function tier, the unit's evaluation, the cache's key): the unit
    cache's key holds it. kernels.key() names the approximations in force, not how they are
    matched: aten.silu_ came to be matched as silu, and cached tiers had to miss."""
    from accuracy.judge import torch_emulation  # torch, only where a unit is judged

    return source_digest(
        typical, torch_emulation, kernels, function_tier, trace, state_key, unit_cache, sys.modules[__name__]
    )


def _ratio_in_force(unit: Unit, inputs: list, fmt: FloatFormat, output, products) -> float | None:
    """The output's ratio to the typical threshold with the approximations in force (None: no tier
    models it). A registry op is held to its tier alone: the op's worst-case bound is what a
    declared finding says the runtime's kernel leaves."""
    evidence, shape, (_, op, compute), _ = _evidence(unit, inputs, fmt, products, [output])
    shaped = np.asarray(output).reshape(shape)
    if op is None:
        judged = evidence.judge(shaped)
        return judged.typical_ratio if judged.verdict == WITHIN else np.inf
    model = evidence.typical(compute or evidence.bound_for(None)[0])
    return None if model is None else model.ratio(rounding_error(shaped, evidence.exact, fmt))


def as_runtime_limit(
    judged: UnitJudgement, unit: Unit, inputs: list, fmt: FloatFormat, label: str, output, products, runtime: str
) -> UnitJudgement | None:
    """`judged`, a port's unit not within rounding, as its runtime's known limit where one of the
    runtime's declared limits puts the output within its typical threshold once the limit's error
    model is in force (accuracy.catalog.runtime_limits); None where none does. The row keeps its
    numbers against the correct kernels' tier; the reason names the limit and the ratio with it."""
    for limit in limits_of(runtime):
        with kernels.using((limit.approximation,)):
            ratio = _ratio_in_force(unit, inputs, fmt, output, products)
        if ratio is None or not ratio <= 1.0:
            continue
        reason = f"{limit.words}: {ratio:.3g}x the typical threshold with {limit.approximation.kernels} modelled"
        return replace(
            judged, judgement=replace(judged.judgement, verdict=RUNTIME_LIMIT, reason=reason), runtime_limit=limit.words
        )
    return None


def judge_unit(
    unit: Unit, inputs: list, fmt: FloatFormat, outputs: dict[str, np.ndarray], products: FloatFormat | None = None
) -> dict[str, UnitJudgement]:
    """Each port's output of `unit` on `inputs` (torch tensors already in `fmt`) judged, by port
    label. `products`: the format the ports' matmuls and convolutions round their inputs to (TF32)."""
    evidence, shape, (tier, op, compute), reference = _evidence(unit, inputs, fmt, products, list(outputs.values()))
    contract = generic_contract(evidence.op, fmt) if op is not None else None
    judged = {}
    for label, output in outputs.items():
        shaped = np.asarray(output).reshape(shape)
        judgement = evidence.judge(shaped, None, contract, compute)
        if tier == LOOKUP_TIER:
            numbers: dict = {"max_ulp": None, "typical_ratio": None, "bound_ratio": None, "worst": {}}
        else:
            numbers = judged_row(label, shaped, evidence.exact, judgement)
        judged[label] = UnitJudgement(judgement, tier, op, numbers, relative(output, reference))
    return judged
