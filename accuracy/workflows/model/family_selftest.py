"""The self-test of the families' causes on every decoder class they apply to: each entry of
causes.families injected into the first module of each of transformers' Gemma 2, Gemma 3, Qwen2,
Qwen3, Mistral, Phi-3 and Llama 3 (tiny configs, random weights) it applies to, judged and
explained as `opbench model` judges and explains a flagged unit; the unchanged module's own
float32 run beside it must be within rounding and get no cause.

The model self-test (cause_selftest) injects each entry into one model's port and runs the whole
sweep; this one judges the changed unit alone, on every class, so that a convention is known
to be named on each family that has it.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from accuracy.backends import get_backend
from accuracy.backends.pytorch import tensor_to_numpy
from accuracy.core.dtypes import FORMATS
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.model import decoders
from accuracy.workflows.model.cause_selftest import NOT_NAMED, RIGHT, WRONG, parameter_close
from accuracy.workflows.model.causes import explain, families
from accuracy.workflows.model.causes.cause import Cause, Context
from accuracy.workflows.model.schedulers import JUDGE_THREADS
from accuracy.workflows.model.trace import run_reference
from accuracy.workflows.model.unit import CauseFinding, Unit, port_inputs
from accuracy.workflows.model.units import judge_unit

FLOAT32 = FORMATS["float32"]
LABEL = "port"


def _first_applicable(entry: Cause, calls: list, modules: dict) -> Any:
    """The first call of a module the entry applies to and changes the output of, with the value
    injected (the example; a discrete parameter's first candidate), or None."""
    import torch

    for call in calls:
        if call.reason or call.output is None or not entry.applies(call.module):
            continue
        context = Context(modules, calls, call)
        values = [entry.example] if entry.example is not None or entry.choices is None else []
        values = values or list(entry.choices(call.module, context))  # type: ignore[misc]
        for value in values:
            try:
                changed = entry.changed(call.module, value, context)
                with torch.no_grad():
                    output = call.run(changed, port_inputs(call.inputs, FLOAT32))
            except Exception:
                continue
            if not torch.equal(output.float(), call.output.float()):
                return call, value, tensor_to_numpy(output), context
    return None


def _outcome(entry: Cause, cause: CauseFinding, injected: Any) -> str:
    if not cause.explains:
        return NOT_NAMED
    named = next((c for c in cause.entries() if c.name == entry.name), None)
    if named is None:
        return WRONG
    return RIGHT if all(parameter_close(v, injected) for v in named.parameters.values()) else WRONG


def inject(model_name: str, entries: tuple[Cause, ...] = families.CAUSES) -> list[dict]:
    """One row per entry that applies to the model: where it was injected, the outcome, the
    cause named, and whether the unchanged module's float32 run there was within rounding."""
    import torch

    model = decoders.base_model(model_name)
    calls, _ = run_reference(model, decoders.base_inputs(model_name), model_name)
    modules = dict(model.named_modules())
    rows = []
    for entry in entries:
        found = _first_applicable(entry, calls, modules)
        if found is None:
            continue
        started = time.perf_counter()
        call, value, output, context = found
        unit, tensors = Unit([call]), port_inputs(call.inputs, FLOAT32)
        with torch.no_grad():
            correct = tensor_to_numpy(call.run(_float32(call.module), tensors))
        # another shape (a partial rotary's cos and sin) is flagged by it, as the sweep's mismatched units
        mismatched = output.shape != correct.shape
        outputs = {"correct": correct} if mismatched else {LABEL: output, "correct": correct}
        # judged and explained on the sweep's one judging thread: a tiny decoder's float64 linear
        # on two threads of a loaded machine took 5 to 20 times the CPU
        with get_backend("torch").thread_limit(JUDGE_THREADS):
            judged = judge_unit(unit, tensors, FLOAT32, outputs)
            row = {"model": model_name, "cause": entry.name, "path": call.key, "injected": value}
            row["correct_within"] = judged["correct"].judgement.verdict == WITHIN
            if not mismatched and judged[LABEL].judgement.verdict == WITHIN:
                rows.append(row | {"outcome": NOT_NAMED, "why": "the injected unit was not flagged"})
                continue
            cause = explain(unit, tensors, FLOAT32, LABEL, output, None, context)
        outcome = _outcome(entry, cause, value)
        named = cause.name if cause.explains else None
        rows.append(row | {"outcome": outcome, "named": named, "parameters": cause.parameters})
        rows[-1]["seconds"] = time.perf_counter() - started
    return rows


def _float32(module: Any) -> Any:
    """The module as a correct port runs it: itself in float32."""
    return copy.deepcopy(module).float().eval()


def family_selftest(models: tuple[str, ...] = tuple(decoders.FAMILY_SELFTEST)) -> dict:
    """Every row of `inject` over `models`, and the rate named right."""
    rows = [row for name in models for row in inject(name)]
    right = sum(r["outcome"] == RIGHT for r in rows)
    return {
        "rows": rows,
        "named_right_rate": right / len(rows) if rows else 1.0,
        "correct_flagged": [f"{r['model']}: {r['path']}" for r in rows if not r["correct_within"]],
    }
