"""Layout and shape causes: a channels-last flatten before a Linear, TensorFlow's "same" padding,
AvgPool's count_include_pad, a pool's ceil_mode, the other interpolation convention (align_corners, half-pixel), a
softmax over another axis, a square Linear's weight transposed.

Every layer is known by what it computes (`kinds.kind_of`: a user's `x.view(x.size(0), -1)`, a
module holding its own weight and bias, a softmax written out, a pool through `F.max_pool2d` with
its geometry in a config dict, a resize through `F.interpolate`); the changes of a pool's or a
resize's geometry are made to torch's module that computes the same (`kinds.as_torch`: a user's
pool as the MaxPool2d of the kernel, stride and padding its probe found)."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from accuracy.workflows.model.causes.cause import Cause, Context
from accuracy.workflows.model.kinds import as_torch, described, held, kind_of

POOLS = ("AvgPool1d", "AvgPool2d", "AvgPool3d")
CEIL_POOLS = ("MaxPool1d", "MaxPool2d", "MaxPool3d", *POOLS)
UPSAMPLES = ("Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d")
LINEAR_MODES = ("linear", "bilinear", "bicubic", "trilinear")


class ChannelsLastFlatten(nn.Module):
    """Flatten (N, C, *spatial) in (N, *spatial, C) order, as a channels-last runtime does."""

    def forward(self, x: Any) -> Any:
        if x.ndim < 3:
            raise ValueError("nothing to reorder")
        return x.movedim(1, -1).flatten(1)


def _channels_last_flatten(module: Any, value: Any) -> Any:
    if (getattr(kind_of(module), "start_dim", None), getattr(module, "end_dim", -1)) != (1, -1):
        raise ValueError("a partial flatten")
    return ChannelsLastFlatten()


def _weight(module: Any) -> Any:
    """A Linear's (out, in) weight, wherever it keeps it."""
    weight = held(module, "weight")
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise ValueError("no (out, in) weight")
    return weight


def _in_features(module: Any) -> int:
    return int(_weight(module).shape[1])


def _flatten_grids(module: Any, context: Context) -> list[int]:
    """The (rows, columns) grids a Linear's input features may have been flattened from, as the
    row count: the (C, H*W) of the flatten before it where the model shows it, else every split."""
    call, n = context.call, _in_features(module)
    if call is None or not call.inputs or call.inputs[0].ndim != 2:
        return []  # a Linear on a flattened vector only
    producer = context.producer()
    source = producer.inputs[0] if producer is not None and producer.inputs else None
    if source is not None and source.ndim >= 3 and math.prod(source.shape[1:]) == n:
        channels = source.shape[1]
        return [channels, n // channels] if 1 < channels < n else []
    return [d for d in range(2, n) if n % d == 0]


def _regridded(module: Any, rows: int) -> Any:
    """The Linear as it acts on a flatten of the other order: weight columns (rows, n / rows) transposed."""
    changed, weight = copy.deepcopy(module), _weight(module)
    out, n = weight.shape
    with torch.no_grad():
        _weight(changed).copy_(weight.view(out, n // rows, rows).transpose(1, 2).reshape(out, n))
    return changed


def _tf_same(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's "same" padding of one axis: (before, after), the odd one after."""
    total = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


class SamePadded(nn.Module):
    """A Conv2d, MaxPool2d or AvgPool2d with TensorFlow's "same" padding instead of its own (an
    AvgPool's count excludes the padding, as TensorFlow's does)."""

    def __init__(self, module: Any):
        super().__init__()
        module = as_torch(module)
        if type(module).__module__.split(".")[0] != "torch":  # a user's module no probe found a geometry of
            raise ValueError(f"not torch's {type(module).__name__}: its kernel, stride and padding are not known")
        if isinstance(module.padding, str) or getattr(module, "padding_mode", "zeros") != "zeros":
            raise ValueError("not zero padding by numbers")
        if getattr(module, "ceil_mode", False):
            raise ValueError("ceil mode")
        self.module = copy.deepcopy(module)

    def forward(self, x: Any) -> Any:
        m = self.module
        pair = nn.modules.utils._pair
        kernel, stride, dilation = pair(m.kernel_size), pair(m.stride or m.kernel_size), pair(getattr(m, "dilation", 1))
        (top, bottom), (left, right) = (_tf_same(x.shape[-2 + i], kernel[i], stride[i], dilation[i]) for i in range(2))
        pads = (left, right, top, bottom)
        if pads == (*[pair(m.padding)[1]] * 2, *[pair(m.padding)[0]] * 2):
            raise ValueError("TensorFlow pads this as torch does")  # the count, if any, is count_include_pad's
        kind = type(m).__name__
        if kind == "Conv2d":
            return F.conv2d(F.pad(x, pads), m.weight, m.bias, m.stride, 0, m.dilation, m.groups)
        if kind == "MaxPool2d":
            return F.max_pool2d(F.pad(x, pads, value=-math.inf), kernel, stride, 0, dilation)
        total = F.avg_pool2d(F.pad(x, pads), kernel, stride, 0)
        return total / F.avg_pool2d(F.pad(torch.ones_like(x[:1, :1]), pads), kernel, stride, 0)


def _count_include_pad(module: Any, value: Any) -> Any:
    module = as_torch(module)
    if not any(nn.modules.utils._ntuple(3)(module.padding)):
        raise ValueError("no padding to count")
    changed = copy.deepcopy(module)
    changed.count_include_pad = not module.count_include_pad
    return changed


def _ceil_mode(module: Any, value: Any, context: Context) -> Any:
    """The pool with ceil_mode flipped, where that changes its output's shape on the unit's input:
    elsewhere both modes take the same windows, and the change is no hypothesis."""
    call, module = context.call, as_torch(module)
    if call is None or not call.inputs:
        raise ValueError("no input to tell the output's shape by")
    changed = copy.deepcopy(module)
    changed.ceil_mode = not module.ceil_mode
    with torch.no_grad():
        if changed(call.inputs[0]).shape == call.output.shape:
            raise ValueError("ceil_mode changes nothing here")
    return changed


def _align_corners(module: Any, value: Any) -> Any:
    module = as_torch(module)
    if module.mode not in LINEAR_MODES:
        raise ValueError("align_corners is for the linear modes")
    changed = copy.deepcopy(module)
    changed.align_corners = not module.align_corners
    return changed


class AsymmetricResize(nn.Module):
    """Interpolation by the asymmetric convention (source = destination * in / out, no half-pixel
    offset): TensorFlow 1's resize without half_pixel_centers, and torch's plain "nearest"."""

    def __init__(self, module: Any):
        super().__init__()
        self.module = copy.deepcopy(as_torch(module))

    def forward(self, x: Any) -> Any:
        m = self.module
        if m.mode in ("nearest", "nearest-exact"):
            return F.interpolate(x, m.size, m.scale_factor, "nearest-exact" if m.mode == "nearest" else "nearest")
        if m.mode not in ("linear", "bilinear", "trilinear") or m.align_corners:
            raise ValueError("not the half-pixel linear convention")
        sizes = F.interpolate(x, m.size, m.scale_factor, "nearest").shape[2:]
        for axis, size in enumerate(sizes, start=2):
            # each axis as a product with its (size, length) interpolation matrix, built from indices
            length = x.shape[axis]
            source = np.arange(size) * (length / size)
            low = np.minimum(np.floor(source).astype(int), length - 1)
            weights = np.zeros((size, length))
            np.add.at(weights, (np.arange(size), low), 1 - (source - low))
            np.add.at(weights, (np.arange(size), np.minimum(low + 1, length - 1)), source - low)
            x = torch.movedim(torch.tensordot(x, torch.from_numpy(weights).to(x.dtype), dims=([axis], [1])), -1, axis)
        return x


def _dim(module: Any) -> int | None:
    return getattr(kind_of(module), "dim", None)


def _axes(module: Any, context: Context) -> list[int]:
    """The other axes of a softmax's input (the unit's call shows its rank)."""
    call, dim = context.call, _dim(module)
    if call is None or not call.inputs or dim is None:
        return []
    rank = call.inputs[0].ndim
    own = dim % rank
    return [axis for axis in range(rank) if axis != own]


def _other_axis(module: Any, axis: int) -> Any:
    """torch's softmax (or log-softmax) of the module's kind over `axis`."""
    return getattr(nn, kind_of(module).name)(dim=axis)  # type: ignore[union-attr]


def _transposed(module: Any, value: Any) -> Any:
    weight = _weight(module)
    if weight.shape[0] != weight.shape[1]:
        raise ValueError("not square")
    changed = copy.deepcopy(module)
    with torch.no_grad():
        _weight(changed).copy_(weight.T)
    return changed


CAUSES: tuple[Cause, ...] = (
    Cause(
        "channels-last flatten",
        ("Flatten",),
        _channels_last_flatten,
        lambda m, v: "a channels-last flatten ((N, H, W, C) order; NHWC) where torch flattens (N, C, H, W)",
    ),
    Cause(
        "channels-last flatten before a Linear",
        ("Linear",),
        lambda m, v: _regridded(m, v),
        lambda m, v: (
            f"its {_in_features(m)} input features flattened in the other order (NHWC vs NCHW): "
            f"a ({v}, {_in_features(m) // v}) grid read transposed"
        ),
        parameter="grid_rows",
        example=4,
        choices=_flatten_grids,
    ),
    Cause(
        "same padding",
        ("Conv2d", "MaxPool2d", "AvgPool2d"),
        lambda m, v: SamePadded(m),
        lambda m, v: (
            f'TensorFlow\'s "same" padding (the odd one after) where this {described(m)} pads '
            f"{as_torch(m).padding} on both sides"
        ),
    ),
    Cause(
        "count_include_pad",
        POOLS,
        _count_include_pad,
        lambda m, v: (
            f"{described(m)} with count_include_pad={not as_torch(m).count_include_pad} "
            f"(the padding {'not ' if as_torch(m).count_include_pad else ''}counted in the average)"
        ),
    ),
    Cause(
        "ceil_mode",
        CEIL_POOLS,
        _ceil_mode,
        lambda m, v: (
            f"{described(m)} with ceil_mode={not as_torch(m).ceil_mode} (the last partial window "
            f"{'dropped' if as_torch(m).ceil_mode else 'kept'}; this model has ceil_mode={as_torch(m).ceil_mode})"
        ),
        contextual=True,
    ),
    Cause(
        "align_corners",
        UPSAMPLES,
        _align_corners,
        lambda m, v: f"{as_torch(m).mode} interpolation with align_corners={not as_torch(m).align_corners}",
    ),
    Cause(
        "interpolation convention",
        UPSAMPLES,
        lambda m, v: AsymmetricResize(m),
        lambda m, v: (
            "half-pixel nearest (nearest-exact) for torch's asymmetric nearest"
            if as_torch(m).mode == "nearest"
            else f"the asymmetric {as_torch(m).mode} interpolation (no half-pixel offset; TensorFlow 1's resize)"
        ),
    ),
    Cause(
        "softmax axis",
        ("Softmax", "LogSoftmax"),
        _other_axis,
        lambda m, v: f"{described(m)} over axis {v}, not this model's dim={_dim(m)}",
        parameter="dim",
        example=1,
        choices=_axes,
    ),
    Cause(
        "transposed weight",
        ("Linear",),
        _transposed,
        lambda m, v: f"its {_in_features(m)}x{_in_features(m)} weight transposed",
    ),
)
