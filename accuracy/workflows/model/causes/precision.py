"""Precision causes: weights stored in a lower-precision format; inputs rounded to one inside a
float32 layer; a matmul or convolution whose products are rounded (autocast, TF32); a softmax or
norm computed in bfloat16 or float16.

The layers are known by what they compute (`kinds.kind_of`): a user's Linear-like module or
hand-written activation is one of them, its weight wherever it keeps it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from accuracy.core.dtypes import FORMATS, FloatFormat
from accuracy.judge.precision import TF32
from accuracy.workflows.model.causes.cause import Cause
from accuracy.workflows.model.causes.nonlinearities import SWAPPED
from accuracy.workflows.model.causes.normalization import NORMS
from accuracy.workflows.model.kinds import described, held, kind_of

CONTRACTIONS = ("Linear", "Conv1d", "Conv2d", "Conv3d")
WEIGHTED = (*CONTRACTIONS, "Embedding", *NORMS)
SOFTMAXES = ("Softmax", "LogSoftmax")
# layers a port may feed a lower-precision copy of their float input
ROUNDING_INPUTS = (*CONTRACTIONS, *NORMS, *SOFTMAXES, *SWAPPED, "Sigmoid", "Tanh", "Hardsigmoid", "LeakyReLU")
LOW = ("bfloat16", "float16")


def rounded(tensor: Any, fmt: FloatFormat) -> Any:
    """`tensor` rounded once to `fmt`, kept in its own dtype: by numpy, so that the float64
    evaluation (which widens a model's own casts) rounds it too."""
    values = np.asarray(fmt.round(tensor.detach().cpu().double().numpy()), dtype=np.float64)
    return torch.from_numpy(values).to(tensor.dtype)


def _stored_in(dtype_name: str):
    def change(module: Any, value: Any) -> Any:
        changed = copy.deepcopy(module)
        with torch.no_grad():
            weight = held(changed, "weight")
            if not isinstance(weight, torch.Tensor):
                raise ValueError("no weight")
            weight.copy_(weight.to(getattr(torch, dtype_name)).to(weight.dtype))
        return changed

    return change


class RoundedAround(nn.Module):
    """The reference module on its first input rounded to `fmt` (`weight`: its weight too, as a
    low-precision matmul rounds both factors; `output`: its output too, computed in `fmt`)."""

    def __init__(self, module: Any, fmt: FloatFormat, weight: bool = False, output: bool = False):
        super().__init__()
        self.module, self.fmt, self.output = copy.deepcopy(module), fmt, output
        stored = [*self.module.named_parameters(), *self.module.named_buffers()]
        kind = kind_of(module)
        own = kind.weight if kind else None  # where the module keeps its weight
        for name, tensor in stored if weight or output else []:
            if tensor.is_floating_point() and (output or name == own):
                tensor.data = rounded(tensor.data, fmt)

    def forward(self, x: Any, *rest: Any, **named: Any) -> Any:
        y = self.module(rounded(x, self.fmt), *rest, **named)
        return rounded(y, self.fmt) if self.output else y


def _rounding(fmt: FloatFormat, weight: bool = False, output: bool = False) -> Callable[[Any, Any], Any]:
    return lambda module, value: RoundedAround(module, fmt, weight, output)


def _said(text: str) -> Callable[[Any, Any], str]:
    """Words with the module's kind put in for {kind}."""
    return lambda module, value: text.format(kind=described(module))


CAUSES: tuple[Cause, ...] = (
    *(Cause(f"weights in {name}", WEIGHTED, _stored_in(name), _said(f"its weights stored in {name}")) for name in LOW),
    *(
        Cause(
            f"products in {fmt.name}",
            CONTRACTIONS,
            _rounding(fmt, weight=True),
            _said(f"its products rounded to {fmt.name} (input and weight; autocast or TF32)"),
        )
        for fmt in (TF32, *(FORMATS[name] for name in LOW))  # TF32 first: float16's precision, a float32 range
    ),
    *(
        Cause(
            f"inputs in {name}",
            ROUNDING_INPUTS,
            _rounding(FORMATS[name]),
            _said(f"its input rounded to {name} inside the float32 layer"),
        )
        for name in LOW
    ),
    *(
        Cause(
            f"computed in {name}",
            (*SOFTMAXES, *NORMS),
            _rounding(FORMATS[name], output=True),
            _said(f"{{kind}} computed in {name} inside the float32 model"),
        )
        for name in LOW
    ),
)
