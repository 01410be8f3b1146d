"""Why a unit is not within rounding: a catalogue of known port bugs, each a hypothesis tested
with the one judge.

A cause *explains* a unit when the reference unit with the change applied (an epsilon fitted,
the tanh GELU, weights stored in bfloat16, ...) puts the port's output within rounding on the
same inputs, and the unchanged reference does not (the unit is flagged). Causes are tried only
for flagged units, cheapest first, a fitted parameter found by a 1-D search of the float64
difference on a log scale before the one full judgement. A package adds causes through the
`opbench.causes` entry point (a module exporting `CAUSES`, a list of `Cause`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.core.plugins import load_plugins
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.model.units import Unit, float64_reference, judge_unit, relative

NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "LlamaRMSNorm")
# where a value is some framework's default, the words say whose
EPS_DEFAULTS = {1e-3: "Keras' and TensorFlow's default", 1e-5: "torch's default", 1e-6: "Llama's RMSNorm default",
                1e-12: "HF BERT's LayerNorm default"}  # fmt: skip
SLOPE_DEFAULTS = {0.01: "torch's default", 0.2: "TensorFlow's default", 0.3: "Keras' default"}


@dataclass(frozen=True)
class Cause:
    """A known port bug: the module kinds it applies to, `change(module, value)` the reference
    module with it (a copy), `values(module)` the candidate values of its parameter (None: no
    parameter; a range: fitted), and `words(module, value)` what the answer says."""

    name: str
    kinds: tuple[str, ...]
    change: Callable[[Any, Any], Any]
    words: Callable[[Any, Any], str]
    values: Callable[[Any], tuple] | None = None
    parameter: str | None = None

    def applies(self, module: Any) -> bool:
        return type(module).__name__ in self.kinds


def _eps_attribute(module: Any) -> str:
    return "eps" if hasattr(module, "eps") else "variance_epsilon"


def _with(attribute: str | Callable[[Any], str]):
    def change(module: Any, value: Any) -> Any:
        changed = copy.deepcopy(module)
        setattr(changed, attribute(module) if callable(attribute) else attribute, value)
        return changed

    return change


def _named(value: float, defaults: dict[float, str]) -> str:
    known = next((words for v, words in defaults.items() if abs(value - v) <= 0.1 * v), None)
    return f"{value:.2g}" + (f" ({known})" if known else "")


def _stored_in(dtype_name: str):
    def change(module: Any, value: Any) -> Any:
        import torch

        changed = copy.deepcopy(module)
        with torch.no_grad():
            weight = getattr(changed, "weight", None)
            if weight is None:
                raise ValueError("no weight")
            weight.copy_(weight.to(getattr(torch, dtype_name)).to(weight.dtype))
        return changed

    return change


def _train_mode(module: Any, value: Any) -> Any:
    return copy.deepcopy(module).train()


def _gelu_other(module: Any, value: Any) -> Any:
    changed = copy.deepcopy(module)
    changed.approximate = "tanh" if module.approximate == "none" else "none"
    return changed


CAUSES: tuple[Cause, ...] = (
    Cause(
        "normalization eps",
        NORMS,
        _with(_eps_attribute),
        lambda m, v: (
            f"{type(m).__name__} eps = {_named(v, EPS_DEFAULTS)}; this model has {getattr(m, _eps_attribute(m)):.2g}"
        ),
        values=lambda m: (1e-12, 1.0),
        parameter="eps",
    ),
    Cause(
        "GELU approximation",
        ("GELU",),
        _gelu_other,
        lambda m, v: "the tanh GELU for the erf GELU" if m.approximate == "none" else "the erf GELU for the tanh GELU",
    ),
    Cause(
        "LeakyReLU slope",
        ("LeakyReLU",),
        _with("negative_slope"),
        lambda m, v: f"LeakyReLU slope = {_named(v, SLOPE_DEFAULTS)}; this model has {m.negative_slope:g}",
        values=lambda m: (1e-4, 1.0),
        parameter="negative_slope",
    ),
    Cause(
        "weights in bfloat16",
        ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding", *NORMS),
        _stored_in("bfloat16"),
        lambda m, v: "its weights stored in bfloat16",
    ),
    Cause(
        "weights in float16",
        ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding", *NORMS),
        _stored_in("float16"),
        lambda m, v: "its weights stored in float16",
    ),
    Cause(
        "train mode",
        ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Dropout"),
        _train_mode,
        lambda m, v: "the model in train mode (batch statistics)",
    ),
)


@functools.cache
def causes() -> tuple[Cause, ...]:
    """The catalogue, then the causes installed packages add."""
    return (*CAUSES, *load_plugins("opbench.causes", "CAUSES", Cause))


def _fitted(cause: Cause, unit: Unit, tensors: list, fmt: FloatFormat, output: np.ndarray) -> Any:
    """The parameter value whose changed reference is nearest the port's output (float64, log scale)."""
    from scipy.optimize import minimize_scalar

    low, high = cause.values(unit.calls[0].module)  # type: ignore[misc]

    def distance(log_value: float) -> float:
        changed = _changed(unit, cause, float(10.0**log_value))
        return relative(output, float64_reference(changed, tensors, fmt))

    grid = np.linspace(np.log10(low), np.log10(high), 25)
    best = grid[int(np.argmin([distance(g) for g in grid]))]
    step = grid[1] - grid[0]
    found = float(10.0 ** minimize_scalar(distance, bounds=(best - step, best + step), method="bounded").x)
    # the value a port was written with is a round number (0.2, 1e-3): the nearest of the fit's roundings
    candidates = {found, *(float(f"{found:.{digits}g}") for digits in (1, 2, 3))}
    return min(candidates, key=lambda v: distance(float(np.log10(v))))


def _changed(unit: Unit, cause: Cause, value: Any) -> Unit:
    call = unit.calls[0]
    return Unit([dataclasses.replace(call, module=cause.change(call.module, value))])


def explain(
    unit: Unit, tensors: list, fmt: FloatFormat, label: str, output: np.ndarray, products: FloatFormat | None
) -> dict:
    """The cause that explains a flagged one-module unit, with its fitted parameters, ratio and the
    other causes that explain it too; or the nearest, marked `explains: False` (`words` None where
    no cause of the catalogue applies to it)."""
    none: dict[str, Any] = {
        "name": None,
        "words": None,
        "parameters": {},
        "verdict": None,
        "ratio": None,
        "explains": False,
    }
    if len(unit.calls) != 1:
        return none | {"alternatives": []}
    module = unit.calls[0].module
    tried: list[dict[str, Any]] = []
    for cause in (c for c in causes() if c.applies(module)):
        try:
            value = _fitted(cause, unit, tensors, fmt, output) if cause.values else None
            judged = judge_unit(_changed(unit, cause, value), tensors, fmt, {label: output}, products)[label]
        except Exception:  # a change this module cannot take: not this cause
            continue
        numbers = judged.numbers
        ratio = next(
            (numbers.get(k) for k in ("typical_ratio", "bound_ratio") if numbers.get(k) == numbers.get(k)), None
        )
        tried.append(
            {
                "name": cause.name,
                "words": cause.words(module, value),
                "parameters": {cause.parameter: value} if cause.parameter else {},
                "verdict": judged.judgement.verdict,
                "ratio": ratio,
                "explains": judged.judgement.verdict == WITHIN,
            }
        )
    if not tried:
        return none | {"alternatives": []}
    explaining = [t for t in tried if t["explains"]]
    best = (
        explaining[0]
        if explaining
        else min(tried, key=lambda t: float(t["ratio"] if t["ratio"] is not None else np.inf))
    )
    return best | {"alternatives": [t["words"] for t in explaining[1:]]}
