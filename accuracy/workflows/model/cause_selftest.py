"""The self-test of causes (#42), measured like verdicts: each catalogue entry injected into a
port of a small zoo model, correct ports beside it.

For each entry of `causes()` (those installed packages add included), the first module of the zoo
models (in `MODELS` order) it applies to is changed with the entry's `example` (or, for a discrete
parameter such as another layer's bias, its first candidate that changes the module) in a copy of
the model; the copy's activations are a port (the format any runtime writes), judged with the
correct ports by `evaluate_ports` as `opbench model` judges them. An input cause changes the
model's input instead (causes.inputs.ModelInput). Per entry: named right (the cause that explains
the injected unit is the entry, its fitted parameter within 10% of the injected one), named wrong
(another explains it, or a cause is named on another unit of the port), not named; and on the
correct ports, every cause named (must be none).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.model import decoders, zoo
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.causes import causes, timed_explanations
from accuracy.workflows.model.causes.cause import Cause, Context
from accuracy.workflows.model.causes.inputs import KIND, ModelInput
from accuracy.workflows.model.ports import build_port
from accuracy.workflows.model.ports.file_port import FilePort
from accuracy.workflows.model.report import PortResult
from accuracy.workflows.model.rows import AbsentPort
from accuracy.workflows.model.trace import record, run_reference
from accuracy.workflows.model.unit import CauseFinding

MODELS = (
    "small_cnn",
    "small_transformer",
    "decoder",
    "small_mixed",
    "llama_padded",  # an attention's mask fill matters on padded rows only
    *decoders.SELFTEST,  # transformers' own decoders: the conventions of their families
)  # seconds each; the first holding a module of the kind wins
CORRECT_PORTS = ("threads:1", "onnxruntime")  # correct ports beside the mutants: other kernels, other roundings
# ONNX Runtime gives a padded query that sees no key the average of the values, where torch's SDPA
# gives 0 (named: "mask fill finite"): not a correct port of llama_padded
CORRECT_PORTS_OF = {"llama_padded": ("threads:1",)}
INPUT = "the model's input"  # where an input cause is injected
RIGHT, WRONG, NOT_NAMED, NOT_INJECTED = "named right", "named wrong", "not named", "not injected"


@dataclass
class Injection:
    """One catalogue entry injected into a port: where, what was named, how long naming took."""

    cause: str
    model: str | None = None
    path: str | None = None  # the module changed, or INPUT
    outcome: str = NOT_INJECTED
    named: str | None = None  # the cause that explains the injected unit, where one does
    parameters: dict = field(default_factory=dict)
    injected: Any = None  # the parameter value injected (the example, or the first candidate)
    seconds: float | None = None  # the added time: the catalogue tried on the flagged unit
    why: str = ""  # why not injected, or what the unit's answer was

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def parameter_close(found: Any, wanted: Any) -> bool:
    """The fitted parameter within 10% of the injected one (elementwise for a per-channel fit)."""
    if wanted is None or isinstance(wanted, (str, bool)):
        return found == wanted or wanted is None
    try:
        return bool(np.allclose(np.array(found, dtype=float), np.array(wanted, dtype=float), rtol=0.1, atol=0))
    except (TypeError, ValueError):
        return False


def _outcome(entry: Cause, cause: CauseFinding | None, injected: Any) -> str:
    """Named right where the entry explains the unit, first or as an equal alternative (TF32 and
    float16 products: the same precision), with its parameter."""
    if not cause or not cause.explains:
        return NOT_NAMED
    named = next((c for c in cause.entries() if c.name == entry.name), None)
    if named is None:
        return WRONG
    return RIGHT if all(parameter_close(v, injected) for v in named.parameters.values()) else WRONG


def _injected_values(entry: Cause, module: Any, context: Context) -> list:
    """The values to inject: the example, else the candidates of a discrete parameter, else None."""
    if entry.example is not None or entry.choices is None:
        return [entry.example]
    return list(entry.choices(module, context))


def _target(entry: Cause, model, given: dict, reference: dict, calls: list) -> tuple[str, dict, Any] | None:
    """(where, the port's activations, the value injected) for the first module (or the input)
    the entry changes."""
    import torch

    if KIND in entry.kinds:
        if not all(np.issubdtype(v.dtype, np.floating) for v in given.values()):
            return None  # token ids: no preprocessing to get wrong
        changed = entry.change(ModelInput(), entry.example)
        with torch.no_grad():
            shifted = {k: changed(torch.from_numpy(v)).numpy() for k, v in given.items()}
        if all(np.array_equal(shifted[k], v) for k, v in given.items()):
            return None
        return INPUT, activations(*record(model, shifted)), entry.example
    modules = dict(model.named_modules())
    for path, module in modules.items():
        if not path or not entry.applies(module):
            continue
        context = Context(modules, calls, next((c for c in calls if c.key == path), None))
        for value in _injected_values(entry, module, context):
            try:
                changed = entry.changed(module, value, context)
                port = copy.deepcopy(model)
                port.set_submodule(path, changed)
                arrays = _activations(port, given, changed, path, context, reference)
            except Exception:  # a change this module cannot take: the next one
                continue
            # an output of another shape (ceil_mode) is a change too: array_equal says so
            if path in arrays and path in reference and not np.array_equal(arrays[path], reference[path]):
                return path, arrays, value
    return None


def _activations(port, given: dict, changed, path: str, context: Context, reference: dict) -> dict:
    """The port's activations; where the layers after the changed module cannot take its output's
    shape (a pool's ceil_mode before a Linear), the reference's with that module's output alone changed."""
    import torch

    try:
        return activations(*record(port, given))
    except Exception:
        if context.call is None:
            raise
        with torch.no_grad():
            output = changed(*context.call.inputs)
        if tuple(output.shape) == tuple(reference[path].shape):
            raise  # the same shape: the port's own failure, not the layers after it
        return {**reference, path: output.numpy()}


def _named_at(port: PortResult, path: str) -> CauseFinding | None:
    if path == INPUT:
        return next((i.cause for i in port.inputs or [] if i.verdict != WITHIN), None)
    return next((r.cause for r in port.layers if r.path == path), None)


def _naming_seconds(times: dict[tuple[str, str], float], port: str, path: str, given: dict) -> float | None:
    """What trying the catalogue on the injected unit took in the sweep (None: it was not flagged)."""
    keys = given if path == INPUT else [path]
    found = [times[(port, key)] for key in keys if (port, key) in times]
    return sum(found) if found else None


def _model(name: str) -> tuple[Any, dict]:
    """A model of MODELS and its inputs: the zoo's, or a transformers decoder (decoders.SELFTEST)."""
    if name in decoders.SELFTEST:
        return decoders.base_model(name), decoders.base_inputs(name)
    return getattr(zoo, name)().eval(), zoo.example_inputs(name)


def model_selftest(progress=None) -> Iterator[dict]:
    """Per zoo model: its injections' rows and what the correct ports named (one dict per model
    holding entries, `{"model", "injections", "correct_ports", "named_on_correct", "seconds"}`),
    then one for the entries no zoo model holds a module for."""
    from accuracy.workflows.model.sweep import evaluate_ports

    pending = list(causes())
    for name in MODELS:
        if not pending:
            break
        started = time.perf_counter()
        model, given = _model(name)
        calls, out = run_reference(model, given, name)
        reference = activations(calls, out)
        ports, injections = [], []
        for entry in list(pending):
            target = _target(entry, model, given, reference, calls)
            if target is None:
                continue
            pending.remove(entry)
            injection = Injection(entry.name, name, target[0], injected=target[2])
            injections.append((entry, injection, FilePort(f"mutant:{entry.name}", target[1])))
        if not injections:
            continue
        built = (build_port(c, model, given) for c in CORRECT_PORTS_OF.get(name, CORRECT_PORTS))
        correct = [p for p in built if not isinstance(p, str)]
        ports = [port for _, _, port in injections] + correct
        with timed_explanations() as times:
            results, failed = evaluate_ports(ports, model, given, calls)
        by_name = {r.port: r for r in results}
        for entry, injection, port in injections:
            _judge_injection(entry, injection, by_name.get(port.name), [f for f in failed if f.port == port.name])
            injection.seconds = _naming_seconds(times, port.name, injection.path or "", given)
        named_on_correct = _named_on_correct(results, {p.name for p in correct})
        report = {
            "model": name,
            "injections": [i.as_dict() for _, i, _ in injections],
            "correct_ports": [p.name for p in correct],
            "named_on_correct": named_on_correct,
            "seconds": time.perf_counter() - started,
        }
        if progress:
            progress(name, report["seconds"])
        yield report
    if pending:
        yield {
            "model": None,
            "injections": [
                Injection(e.name, why=f"no module of kind {', '.join(e.kinds)} in {', '.join(MODELS)}").as_dict()
                for e in pending
            ],
            "correct_ports": [],
            "named_on_correct": [],
            "seconds": 0.0,
        }


def _judge_injection(entry: Cause, injection: Injection, result: PortResult | None, failures: list[AbsentPort]) -> None:
    """The injection's outcome from its port's result (or its port's failures): the cause named
    at its unit, and none named on a unit it was not injected into."""
    if result is None:
        injection.outcome = NOT_NAMED
        injection.why = "the port failed: " + "; ".join(f.reason for f in failures)
        return
    cause = _named_at(result, injection.path or "")
    injection.outcome = _outcome(entry, cause, injection.injected)
    if cause:
        injection.named = cause.name if cause.explains else None
        injection.parameters = cause.parameters
        injection.why = "" if cause.explains else f"nearest: {cause.words} ({cause.ratio})"
    else:
        injection.why = "the unit was not flagged"
    elsewhere = [
        row.path
        for row in result.layers
        # a module called twice (relu, relu#2) is injected in every call
        if row.path.split("#")[0] != injection.path and _explains(row.cause)
    ]
    if elsewhere:  # a cause named on a unit the bug was not injected into: a wrong answer too
        injection.outcome = WRONG
        injection.why += f"; a cause named elsewhere too: {', '.join(elsewhere)}"


def _input_causes(result: PortResult) -> list[tuple[str, CauseFinding | None]]:
    """Each input the port shows its own of, with the cause found for it (or None)."""
    return [(i.input, i.cause) for i in result.inputs or []]


def _named_on_correct(results: list[PortResult], correct: set[str]) -> list[str]:
    """The causes named on correct ports, on a unit or on an input: each a false cause."""
    return [
        f"{r.port}: {path}: {cause.name}"
        for r in results
        if r.port in correct
        for path, cause in [*((row.path, row.cause) for row in r.layers), *_input_causes(r)]
        if cause is not None and _explains(cause)
    ]


def _explains(cause: CauseFinding | None) -> bool:
    return cause is not None and cause.explains


def model_summary(reports: list[dict]) -> dict:
    """Counts over every entry injected; the rate counts the entries injected (none are dropped
    silently: those no zoo model holds are listed as not injected)."""
    rows = [i for r in reports for i in r["injections"]]
    injected = [i for i in rows if i["outcome"] != NOT_INJECTED]
    counts = {k: sum(i["outcome"] == k for i in rows) for k in (RIGHT, WRONG, NOT_NAMED, NOT_INJECTED)}
    return {
        "entries": len(rows),
        **{k.replace(" ", "_"): v for k, v in counts.items()},
        "named_right_rate": counts[RIGHT] / len(injected) if injected else 1.0,
        "named_on_correct": sum(len(r["named_on_correct"]) for r in reports),
        "seconds": sum(r["seconds"] for r in reports),
    }
