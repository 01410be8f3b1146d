"""Normalization causes: another epsilon (fitted), batch statistics (train mode), the epsilon
added outside the square root, the unbiased variance; and a dropout left in train mode.

A norm is known by what it computes, not by its class name alone: torch's own by their class, any
other module (a user's `RMSNorm`, HF's `T5LayerNorm`) by a probe in float64 that finds it
normalizes each row by its root mean square or its standard deviation, and with what epsilon.
Its epsilon is wherever the module keeps it: an attribute (`eps`, `variance_epsilon`, ...), a
config it holds (a dict or an object), or a constant in its forward (then the changed norm is the
norm written out). A BatchNorm is known the same way (a user's, holding its running statistics
under other names, its eps in a config or a constant, with or without an affine weight): its
written-out variants and its train mode are torch's BatchNorm on its tensors (`kinds.as_torch`)."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from accuracy.workflows.model.causes.cause import Cause, named
from accuracy.workflows.model.kinds import affine, as_torch, described, norm_kind, probed

NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "LlamaRMSNorm")
# where a value is some framework's default, the words say whose
EPS_DEFAULTS = {1e-3: "Keras' and TensorFlow's default", 1e-5: "torch's default", 1e-6: "Llama's RMSNorm default",
                1e-12: "HF BERT's LayerNorm default"}  # fmt: skip
# the names an epsilon goes by, on the module or in a config it holds (first found wins)
EPS_NAMES = ("eps", "variance_epsilon", "epsilon", "norm_eps", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


def _eps_path(module: Any) -> tuple[str, ...] | None:
    """Where `module` keeps its epsilon: (attribute,) or (config attribute, key or attribute)."""

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    found = next((name for name in EPS_NAMES if number(getattr(module, name, None))), None)
    if found:
        return (found,)
    for attribute, held in vars(module).items():
        if attribute.startswith("_") or isinstance(held, (nn.Module, torch.Tensor)):
            continue
        fields = held if isinstance(held, dict) else getattr(held, "__dict__", None)
        if isinstance(fields, dict):
            key = next((name for name in EPS_NAMES if number(fields.get(name))), None)
            if key:
                return (attribute, key)
    return None


def _at(module: Any, path: tuple[str, ...]) -> Any:
    held = getattr(module, path[0])
    return held if len(path) == 1 else held[path[1]] if isinstance(held, dict) else getattr(held, path[1])


def is_norm(module: Any) -> bool:
    return norm_kind(module) is not None


def holds_eps(module: Any) -> bool:
    """A norm, or a leaf of 1-D parameters that keeps an epsilon (a gated norm, a norm taking
    another argument): its epsilon can be changed where it is kept."""
    if is_norm(module):
        return True
    one_dimensional = all(p.ndim == 1 for p in module.parameters())
    return not list(module.children()) and one_dimensional and _eps_path(module) is not None


def norm_eps(module: Any) -> float | None:
    """The epsilon the norm computes with, wherever it keeps it (None: torch's default)."""
    path = _eps_path(module)
    if path is not None:
        return float(_at(module, path))
    found = probed(module)
    if found:
        return found[1]
    equivalent = as_torch(module) if norm_kind(module) == "batch" else None
    return float(equivalent.eps) if equivalent is not None else None


def _with_eps(module: Any, value: Any) -> Any:
    """A copy of the norm with epsilon `value`, set where it keeps it, or the norm written out."""
    path = _eps_path(module)
    if path is None:
        return NormWritten(module, eps=value)
    changed = copy.deepcopy(module)
    if len(path) == 1:
        setattr(changed, path[0], value)
        return changed
    held = copy.copy(getattr(changed, path[0]))  # its own config: the model's other modules keep theirs
    if isinstance(held, dict):
        held[path[1]] = value
    else:
        setattr(held, path[1], value)
    setattr(changed, path[0], held)
    return changed


def _eps_words(module: Any, value: Any) -> str:
    own = norm_eps(module)
    return f"{type(module).__name__} eps = {named(value, EPS_DEFAULTS)}" + (
        f"; this model has {own:.2g}" if own is not None else ""
    )


def _train_mode(module: Any, value: Any) -> Any:
    """The BatchNorm in train mode (batch statistics): torch's own for a user's (its forward may
    not read `self.training`)."""
    return copy.deepcopy(as_torch(module)).train()


class NormWritten(nn.Module):
    """A reference norm written out from its parameters, with the port's variant: epsilon added
    outside the square root (x / (sqrt(var) + eps)), the unbiased variance (n - 1), or another
    epsilon (`eps`). Evaluation mode only: a BatchNorm normalizes by its running statistics."""

    def __init__(self, norm: Any, eps_outside: bool = False, unbiased: bool = False, eps: float | None = None):
        super().__init__()
        kind = norm_kind(norm)
        if kind is None:
            raise ValueError("not a norm: it normalizes by neither a root mean square nor a variance")
        if kind == "batch":
            eps, norm = norm_eps(norm) if eps is None else eps, as_torch(norm)  # its statistics by torch's names
        if kind == "batch" and (norm.training or norm.running_var is None):
            raise ValueError("a BatchNorm in train mode or without running statistics")
        eps = norm_eps(norm) if eps is None else eps
        if eps is None or (unbiased and kind in ("batch", "rms")):
            raise ValueError("no such variant of this norm")  # RMSNorm has no variance, BatchNorm a stored one
        self.norm, self.kind, self.eps = copy.deepcopy(norm), kind, float(eps)
        self.eps_outside, self.unbiased = eps_outside, unbiased

    def _scaled(self, x: Any, denominator: Any, centred: Any) -> Any:
        return centred / (denominator.sqrt() + self.eps if self.eps_outside else (denominator + self.eps).sqrt())

    def forward(self, x: Any) -> Any:
        norm, correction = self.norm, int(self.unbiased)
        channels = (1, -1) + (1,) * (x.ndim - 2)
        weight, bias = affine(norm)
        if self.kind == "batch":
            y = self._scaled(x, norm.running_var.view(channels), x - norm.running_mean.view(channels))
        elif self.kind == "group":
            grouped = x.reshape(x.shape[0], norm.num_groups, -1)
            mean, var = grouped.mean(-1, keepdim=True), grouped.var(-1, keepdim=True, correction=correction)
            y = self._scaled(grouped, var, grouped - mean).reshape(x.shape)
        else:
            width = getattr(norm, "normalized_shape", None) or (weight.shape if weight is not None else x.shape[-1:])
            dims = tuple(range(-len(width), 0))
            if self.kind == "rms":
                y = self._scaled(x, x.pow(2).mean(dims, keepdim=True), x)
            else:
                mean, var = x.mean(dims, keepdim=True), x.var(dims, keepdim=True, correction=correction)
                y = self._scaled(x, var, x - mean)
        per_channel = self.kind in ("batch", "group")
        if weight is not None:
            y = y * (weight.view(channels) if per_channel else weight)
        if bias is not None:
            y = y + (bias.view(channels) if per_channel else bias)
        return y


# a dropout's share of dropped elements is binomial: a port's share this many standard deviations
# from p is no dropout of p
DROPPED_SPREAD = 5.0


class Dropped(nn.Module):
    """A dropout in train mode: the elements `kept` says survived, scaled by 1 / (1 - p); `kept`
    None: drawn from a generator seeded 0 (the self-test's injection)."""

    def __init__(self, p: float, kept: Any = None):
        super().__init__()
        self.p, self.kept = p, kept

    def forward(self, x: Any) -> Any:
        kept = self.kept
        if kept is None:
            kept = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) >= self.p
        return x * kept.reshape(x.shape).to(x.dtype) / (1 - self.p)


def _dropout_p(module: Any) -> float:
    p = getattr(as_torch(module), "p", None)
    if not isinstance(p, float) or not 0 < p < 1:
        raise ValueError("no dropout probability in (0, 1)")
    return p


def _kept(module: Any, inputs: list, output: Any) -> Any:
    """The elements the port's dropout kept: those of its output that are not 0 (an input element
    of 0 is 0 either way); refused where the share it dropped is no dropout of the module's p."""
    p, x = _dropout_p(module), inputs[0]
    kept = torch.from_numpy(np.asarray(output) != 0).reshape(x.shape)
    telling = x != 0
    n = int(telling.sum())
    dropped = int((telling & ~kept).sum()) / max(n, 1)
    if not n or abs(dropped - p) > DROPPED_SPREAD * math.sqrt(p * (1 - p) / n) + 1 / n:
        raise ValueError(f"it dropped {dropped:.0%} of its elements, no dropout of p={p:g}")
    return kept


def _dropped_words(module: Any, kept: Any) -> str:
    p = _dropout_p(module)
    share = "some" if kept is None else f"{1 - float(kept.float().mean()):.0%}"
    return f"{described(module)} left in train mode: {share} of its elements dropped, the rest scaled by 1/(1 - {p:g})"


CAUSES: tuple[Cause, ...] = (
    Cause(
        "normalization eps",
        NORMS,
        _with_eps,
        _eps_words,
        values=lambda m: (1e-12, 1.0),
        parameter="eps",
        example=1e-3,
        accepts=holds_eps,
    ),
    Cause(
        "train mode",
        ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"),
        _train_mode,
        lambda m, v: "the model in train mode (batch statistics)",
    ),
    Cause(
        "dropout in train mode",
        ("Dropout",),
        lambda m, kept: Dropped(_dropout_p(m), kept),
        _dropped_words,
        fit=_kept,
    ),
    Cause(
        "eps outside the square root",
        NORMS,
        lambda m, v: NormWritten(m, eps_outside=True),
        lambda m, v: f"{type(m).__name__} eps added outside the square root (x / (sqrt(var) + eps)), not inside",
        accepts=is_norm,
    ),
    Cause(
        "unbiased variance",
        ("LayerNorm", "GroupNorm"),
        lambda m, v: NormWritten(m, unbiased=True),
        lambda m, v: f"{type(m).__name__} with the unbiased variance (divided by n - 1), not the biased one (n)",
        accepts=lambda m: norm_kind(m) == "layer",
    ),
)
