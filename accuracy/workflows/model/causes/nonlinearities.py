"""Activation causes: the other GELU, another LeakyReLU slope (fitted), another activation
altogether, the other hard sigmoid (the slope of clip(slope * x + 0.5, 0, 1), fitted).

An activation is known by what it computes (`kinds.kind_of`): a user's `x * torch.sigmoid(x)` is
a SiLU, `torch.where(x > 0, x, 0.1 * x)` a LeakyReLU of slope 0.1. Each change is torch's module
of the kind, so it needs no attribute of the user's class. The other GELU of a GELU that is not
torch's is `families`' entry (transformers' GELU classes), the one entry for it."""

from __future__ import annotations

from typing import Any

from torch import nn

from accuracy.workflows.model.causes.cause import Cause, named
from accuracy.workflows.model.kinds import described, kind_name, kind_of

SLOPE_DEFAULTS = {0.01: "torch's default", 0.2: "TensorFlow's default", 0.3: "Keras' default"}
# the activations a port swaps for one another, each as torch defines it
SWAPPED = {"SiLU": nn.SiLU, "GELU": nn.GELU, "ReLU": nn.ReLU, "ReLU6": nn.ReLU6, "Hardswish": nn.Hardswish}
# torch's relu6(x + 3) / 6 is clip(x / 6 + 0.5, 0, 1); Keras 2's and TensorFlow's is clip(0.2 x + 0.5, 0, 1)
HARD_SIGMOID_SLOPES = {1 / 6: "torch's", 0.2: "Keras 2's and TensorFlow's"}


def _gelu_other(module: Any, value: Any) -> Any:
    return nn.GELU(approximate="tanh" if module.approximate == "none" else "none")


def _slope(module: Any) -> float:
    found = kind_of(module)
    if found is None or found.slope is None:
        raise ValueError("no LeakyReLU slope")
    return found.slope


def _swapped(module: Any, value: str) -> Any:
    return SWAPPED[value]()


class HardSigmoid(nn.Module):
    """clip(slope * x + 0.5, 0, 1), times x for the hard swish: the hard sigmoid with any slope."""

    def __init__(self, slope: float, swish: bool):
        super().__init__()
        self.slope, self.swish = slope, swish

    def forward(self, x: Any) -> Any:
        gate = (self.slope * x + 0.5).clamp(0.0, 1.0)
        return x * gate if self.swish else gate


CAUSES: tuple[Cause, ...] = (
    Cause(
        "GELU approximation",
        (),
        _gelu_other,
        lambda m, v: "the tanh GELU for the erf GELU" if m.approximate == "none" else "the erf GELU for the tanh GELU",
        accepts=lambda m: isinstance(m, nn.GELU),
    ),
    Cause(
        "LeakyReLU slope",
        ("LeakyReLU",),
        lambda m, v: nn.LeakyReLU(v),
        lambda m, v: f"LeakyReLU slope = {named(v, SLOPE_DEFAULTS)}; this model has {_slope(m):g}",
        values=lambda m: (1e-4, 1.0),
        parameter="negative_slope",
        example=0.2,
    ),
    Cause(
        "another activation",
        tuple(SWAPPED),
        _swapped,
        lambda m, v: f"{v} for {described(m)}",
        parameter="activation",
        example="SiLU",
        choices=lambda m, context: [name for name in SWAPPED if name != kind_name(m)],
    ),
    Cause(
        "hard sigmoid slope",
        ("Hardsigmoid", "Hardswish"),
        lambda m, v: HardSigmoid(v, kind_name(m) == "Hardswish"),
        lambda m, v: (
            f"{described(m)} by the hard sigmoid clip(s x + 0.5, 0, 1) with s = "
            f"{named(v, HARD_SIGMOID_SLOPES)}; this model has torch's relu6(x + 3) / 6 (s = 1/6)"
        ),
        values=lambda m: (0.01, 1.0),
        parameter="slope",
        example=0.2,
    ),
)
