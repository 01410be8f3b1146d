"""Normalization causes: another epsilon (fitted), batch statistics (train mode), the epsilon
added outside the square root, the unbiased variance."""

from __future__ import annotations

import copy
from typing import Any

from torch import nn

from accuracy.workflows.model.causes.cause import Cause, named, with_attribute

NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "LlamaRMSNorm")
# where a value is some framework's default, the words say whose
EPS_DEFAULTS = {1e-3: "Keras' and TensorFlow's default", 1e-5: "torch's default", 1e-6: "Llama's RMSNorm default",
                1e-12: "HF BERT's LayerNorm default"}  # fmt: skip


def _eps_attribute(module: Any) -> str:
    return "eps" if hasattr(module, "eps") else "variance_epsilon"


def _train_mode(module: Any, value: Any) -> Any:
    return copy.deepcopy(module).train()


class NormWritten(nn.Module):
    """A reference norm written out from its parameters, with the port's variant: epsilon added
    outside the square root (x / (sqrt(var) + eps)) or the unbiased variance (n - 1). Evaluation
    mode only: a BatchNorm normalizes by its running statistics."""

    def __init__(self, norm: Any, eps_outside: bool = False, unbiased: bool = False):
        super().__init__()
        kind = type(norm).__name__
        if kind.startswith("BatchNorm") and (norm.training or norm.running_var is None):
            raise ValueError("a BatchNorm in train mode or without running statistics")
        eps = getattr(norm, _eps_attribute(norm))
        if eps is None or (unbiased and (kind.startswith("BatchNorm") or "RMS" in kind)):
            raise ValueError("no such variant of this norm")  # RMSNorm has no variance, BatchNorm a stored one
        self.norm, self.kind, self.eps = copy.deepcopy(norm), kind, float(eps)
        self.eps_outside, self.unbiased = eps_outside, unbiased

    def _scaled(self, x: Any, denominator: Any, centred: Any) -> Any:
        return centred / (denominator.sqrt() + self.eps if self.eps_outside else (denominator + self.eps).sqrt())

    def forward(self, x: Any) -> Any:
        norm, correction = self.norm, int(self.unbiased)
        channels = (1, -1) + (1,) * (x.ndim - 2)
        if self.kind.startswith("BatchNorm"):
            y = self._scaled(x, norm.running_var.view(channels), x - norm.running_mean.view(channels))
        elif self.kind == "GroupNorm":
            grouped = x.reshape(x.shape[0], norm.num_groups, -1)
            mean, var = grouped.mean(-1, keepdim=True), grouped.var(-1, keepdim=True, correction=correction)
            y = self._scaled(grouped, var, grouped - mean).reshape(x.shape)
        else:
            width = getattr(norm, "normalized_shape", None) or norm.weight.shape
            dims = tuple(range(-len(width), 0))
            if "RMS" in self.kind:
                y = self._scaled(x, x.pow(2).mean(dims, keepdim=True), x)
            else:
                mean, var = x.mean(dims, keepdim=True), x.var(dims, keepdim=True, correction=correction)
                y = self._scaled(x, var, x - mean)
        weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)
        per_channel = self.kind.startswith("BatchNorm") or self.kind == "GroupNorm"
        if weight is not None:
            y = y * (weight.view(channels) if per_channel else weight)
        if bias is not None:
            y = y + (bias.view(channels) if per_channel else bias)
        return y


CAUSES: tuple[Cause, ...] = (
    Cause(
        "normalization eps",
        NORMS,
        with_attribute(_eps_attribute),
        lambda m, v: (
            f"{type(m).__name__} eps = {named(v, EPS_DEFAULTS)}; this model has {getattr(m, _eps_attribute(m)):.2g}"
        ),
        values=lambda m: (1e-12, 1.0),
        parameter="eps",
        example=1e-3,
    ),
    Cause(
        "train mode",
        ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Dropout"),
        _train_mode,
        lambda m, v: "the model in train mode (batch statistics)",
    ),
    Cause(
        "eps outside the square root",
        NORMS,
        lambda m, v: NormWritten(m, eps_outside=True),
        lambda m, v: f"{type(m).__name__} eps added outside the square root (x / (sqrt(var) + eps)), not inside",
    ),
    Cause(
        "unbiased variance",
        ("LayerNorm", "GroupNorm"),
        lambda m, v: NormWritten(m, unbiased=True),
        lambda m, v: f"{type(m).__name__} with the unbiased variance (divided by n - 1), not the biased one (n)",
    ),
)
