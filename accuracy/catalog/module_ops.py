"""Which torch modules compute a registry op, declared as data: `opbench model` judges such a
module by the op's bounds and tiers (as `explain` judges the op) instead of the typical tier alone.

A module matches an entry only where it computes exactly the op the registry declares: the same
epsilon, one normalized axis, a square kernel with stride 1 and no padding, the erf GELU. Anything
else (a Conv2d with padding, a tanh GELU) is judged by the typical tier of its torch ops, which
holds any function to what a correct evaluation of it errs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accuracy.catalog.ops.common import LAYER_NORM_EPS
from accuracy.catalog.ops.norms import BN_EPS, GN_GROUPS

# How the module's one input becomes the op's `x`: as it is, as rows over its last axis (a Linear,
# a LayerNorm, a softmax over the last axis), or as (batch, channels, everything else) (a norm).
AS_IS, ROWS, CHANNELS = "as is", "rows", "channels"


def _last_axis(dim: Any, x: Any) -> bool:
    return dim == -1 or dim == x.ndim - 1


def _one_axis(shape: Any, x: Any) -> bool:
    return len(shape) == 1


def _square(kernel: Any, x: Any) -> bool:
    return len(set(kernel)) == 1


@dataclass(frozen=True)
class ModuleOp:
    """A torch module class that computes registry op `op` when its attributes are as `requires`
    says (a value, or a predicate of the value and the input); `params` names the op's other
    inputs by the module attribute that holds them (a None attribute: no match, a Linear without
    bias is not the registry's linear). `contraction`: its products are rounded to TF32 where a
    CUDA port runs with TF32 on."""

    modules: tuple[str, ...]
    op: str
    x: str = AS_IS
    params: dict[str, str] = field(default_factory=dict)
    requires: dict[str, Any | Callable[[Any, Any], bool]] = field(default_factory=dict)
    contraction: bool = False

    def matches(self, module: Any, x: Any) -> bool:
        if type(module).__name__ not in self.modules:
            return False
        for name, wanted in self.requires.items():
            value = getattr(module, name, None)
            if not (wanted(value, x) if callable(wanted) else value == wanted):
                return False
        return all(getattr(module, attribute, None) is not None for attribute in self.params.values())

    def shaped(self, x: Any) -> Any:
        if self.x == ROWS:
            return x.reshape(-1, x.shape[-1])
        if self.x == CHANNELS:
            return x.reshape(x.shape[0], x.shape[1], -1)
        return x


MODULE_OPS: tuple[ModuleOp, ...] = (
    ModuleOp(("Linear",), "linear", ROWS, {"W": "weight", "b": "bias"}, contraction=True),
    ModuleOp(
        ("Conv2d",),
        "conv2d",
        AS_IS,
        {"w": "weight", "b": "bias"},
        {
            "stride": (1, 1),
            "padding": (0, 0),
            "dilation": (1, 1),
            "groups": 1,
            "padding_mode": "zeros",
            "kernel_size": _square,
        },
        contraction=True,
    ),
    ModuleOp(
        ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"),
        "batch_norm",
        CHANNELS,
        {"mean": "running_mean", "var": "running_var", "w": "weight", "b": "bias"},
        {"training": False, "eps": BN_EPS},
    ),
    ModuleOp(
        ("LayerNorm",),
        "layer_norm",
        ROWS,
        {"w": "weight", "b": "bias"},
        {"eps": LAYER_NORM_EPS, "normalized_shape": _one_axis},
    ),
    ModuleOp(
        ("GroupNorm",),
        "group_norm",
        CHANNELS,
        {"w": "weight", "b": "bias"},
        {"num_groups": GN_GROUPS, "eps": LAYER_NORM_EPS},
    ),
    ModuleOp(("Softmax",), "softmax", ROWS, requires={"dim": _last_axis}),
    ModuleOp(("GELU",), "gelu", requires={"approximate": "none"}),
    ModuleOp(("SiLU",), "silu"),
    ModuleOp(("ReLU",), "relu"),
    ModuleOp(("Sigmoid",), "sigmoid"),
)


def module_op(module: Any, x: Any) -> ModuleOp | None:
    """The entry `module` computes on input `x`, or None."""
    return next((entry for entry in MODULE_OPS if entry.matches(module, x)), None)
