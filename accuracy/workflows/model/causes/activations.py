"""Activation causes: the other GELU, another LeakyReLU slope (fitted)."""

from __future__ import annotations

import copy
from typing import Any

from accuracy.workflows.model.causes.cause import Cause, named, with_attribute

SLOPE_DEFAULTS = {0.01: "torch's default", 0.2: "TensorFlow's default", 0.3: "Keras' default"}


def _gelu_other(module: Any, value: Any) -> Any:
    changed = copy.deepcopy(module)
    changed.approximate = "tanh" if module.approximate == "none" else "none"
    return changed


CAUSES: tuple[Cause, ...] = (
    Cause(
        "GELU approximation",
        ("GELU",),
        _gelu_other,
        lambda m, v: "the tanh GELU for the erf GELU" if m.approximate == "none" else "the erf GELU for the tanh GELU",
    ),
    Cause(
        "LeakyReLU slope",
        ("LeakyReLU",),
        with_attribute("negative_slope"),
        lambda m, v: f"LeakyReLU slope = {named(v, SLOPE_DEFAULTS)}; this model has {m.negative_slope:g}",
        values=lambda m: (1e-4, 1.0),
        parameter="negative_slope",
        example=0.2,
    ),
)
