"""A unit's typical tier through the reference cache: a rerun of `opbench model` with another
port judges each unit already judged on the same inputs without its Monte Carlo runs.

The entry (the TypicalModel's scale, compute format and roundings, from which its threshold and
worst case are rebuilt bit for bit, and the basis text) is keyed by everything its computation
reads: the unit's inputs, `fmt` and `products`, every parameter, buffer and attribute of its
modules and their submodules, the code of their classes (source and the code objects of their
methods), how each call was made (its non-tensor arguments), the code of the judge itself and the
versions it runs on, and the unit's float64 evaluation on those inputs (one forward: whatever
changes the unit's function, a helper in another file, a patched torch function, a torch function
mode, changes it). State the key cannot describe (a forward hook, an object of unknown kind, a
class without source) judges the unit afresh.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.judge import kernels, typical
from accuracy.judge.function_tier import Stages, run_stages
from accuracy.judge.typical import judged_errors, model_from_scale, settled
from accuracy.judge.verdicts import Evidence, FunctionSubject
from accuracy.reference import cache as refcache
from accuracy.reference.exact import Exact
from accuracy.workflows.model.state_key import (
    Key,
    Uncacheable,
    global_hooks,
    put_array,
    put_module,
    put_tensor,
    put_value,
)

KEY_FORMAT = 1


def unit_key(
    unit: Any, inputs: list, fmt: FloatFormat, products: FloatFormat | None, reference: np.ndarray, code: str
) -> str | None:
    """The key of `unit`'s typical tier on `inputs` (torch tensors in `fmt`) whose float64
    evaluation is `reference`, computed by the code whose digest is `code` (its caller's: an edit
    of opbench itself misses, whatever MODEL_VERSION says); None where some state of it cannot be
    described."""
    import torch

    key = Key(f"unit-typical:{KEY_FORMAT}")
    try:
        if global_hooks():
            raise Uncacheable("a global forward hook")
        key.put("versions", f"{torch.__version__}:{np.__version__}:{sys.version}:{code}")
        key.put("default dtype", str(torch.get_default_dtype()))
        key.put(
            "tier",
            f"{typical.MODEL_VERSION}:{typical.TYPICAL_Z!r}:{typical.RANDOM_RUNS}:{typical.SEED}:{typical.WORST_MARGIN!r}"
            f":kernels-{kernels.key()}",
        )
        key.put("formats", f"{fmt.name}:{None if products is None else products.name}")
        key.put("inputs", str(len(inputs)))
        for t in inputs:
            put_tensor(key, t)
        key.put("calls", str(len(unit.calls)))
        for call in unit.calls:
            template = call.template
            if template is None:
                key.put("template")
            else:  # the pytree's structure and its non-tensor leaves (flags, sizes, names)
                key.put("template", str(template.spec))
                key.put("slots", str(template.slots))
                leaves = [None if i in template.slots else v for i, v in enumerate(template.leaves)]
                put_value(key, leaves, 0, frozenset())
            put_module(key, call.module)
        put_array(key, np.asarray(reference))
    except Uncacheable:
        return None
    return key.hash.hexdigest()


def _stored(stages: Stages) -> dict[str, np.ndarray]:
    """Each stage's model as kept: its scale (its threshold and worst case follow from it, the
    reference and the roundings: a third of the disk), compute format, roundings and basis text."""
    arrays: dict[str, np.ndarray] = {}
    for stage, (model, basis) in stages.items():
        assert model.roundings is not None  # a torch function's tier always counts them
        arrays |= {
            f"scale_{stage}": model.scale,
            f"compute_{stage}": np.array(model.compute),
            f"roundings_{stage}": np.array(model.roundings),
            f"basis_{stage}": np.array(basis),
        }
    return arrays


def _rebuilt(stored: dict[str, np.ndarray], exact: Exact, fmt: FloatFormat) -> Stages:
    stages: Stages = {}
    for name in stored:
        stage = int(name.removeprefix("scale_")) if name.startswith("scale_") else None
        if stage is None or stored[name].shape != exact.shape:
            continue
        model = model_from_scale(stored[name], exact, fmt, str(stored[f"compute_{stage}"]))
        model = model.with_worst_case(int(stored[f"roundings_{stage}"]), exact, fmt)
        stages[stage] = (model, str(stored[f"basis_{stage}"]))
    return stages


def _replayed(stages: Stages, judged: Sequence[np.ndarray], exact: Exact, fmt: FloatFormat):
    """The (model, basis) the derivation would end with for `judged`, from its stored stages
    (the same stages in the same order, stopping where it would); None where it would go on to a
    stage not stored (this port's outputs are not settled where another port's were)."""
    if 0 in stages:  # the first-order spread: no runs, the same tier for any output
        return stages[0]
    found = None
    errors = judged_errors(judged, exact, fmt)
    for stage in run_stages(judged):
        if stage not in stages:
            return None
        found = stages[stage]
        if settled(found[0], errors, stage):
            break
    return found


def cached_function_evidence(
    key: str | None,
    name: str,
    named: dict[str, np.ndarray],
    fmt: FloatFormat,
    exact: Exact,
    judged: Sequence[np.ndarray],
    compute: Callable[[Stages], Evidence],
) -> Evidence:
    """The evidence `compute(stages)` gives (filling `stages`), its typical tier at each stage
    derived stored under `key` (None: not cached) and replayed for `judged` on a later run:
    `name`, `named`, `fmt` and `exact` as `compute` would use them. A tier that could not be
    derived stores nothing (its failure may be this run's alone)."""
    stored = refcache.load_arrays(key) if key is not None else None
    if stored is not None:
        try:
            replayed = _replayed(_rebuilt(stored, exact, fmt), judged, exact, fmt)
        except (KeyError, ValueError):  # an entry of another layout
            replayed = None
        if replayed is not None:
            return Evidence(FunctionSubject(name, *replayed), named, fmt, exact)
    stages: Stages = {}
    evidence = compute(stages)
    if key is not None and evidence.op.model is not None and stages:
        refcache.store_arrays(key, _stored(stages))
    return evidence
