"""What a module computes, as the catalogue's entries know it: torch's own modules by their class
(the fast path), any other leaf module by a float64 probe of its forward and the shapes of what
it holds. A user's hand-written module is matched by what it computes, not by its class name:
an activation written as `x * torch.sigmoid(x)` is a SiLU, a GELU written with tanh a GELU, a
module holding a (out, in) weight and a (out,) bias whose forward is `x @ w.T + b` a Linear (its
(out, in, kh, kw) weight convolved: a Conv2d), a module dividing each row by its RMS or standard
deviation a norm (whatever its epsilon's place), one that maps each channel by the affine
(x - mean) / sqrt(var + eps) * w + b of the 1-D statistics it holds a BatchNorm (its eps found from
what it computes), a parameterless module over a grid a max or average pool (its kernel, stride,
padding and modes found from its outputs), an adaptive pool or a resize (nearest, bilinear,
bicubic, align_corners either way), and one that is the identity in eval and zeroes and scales in
train mode a Dropout. Such a module's `Kind.torch` is torch's own module that computes the same
(`as_torch`): the entries that change a pool's or a resize's geometry, a BatchNorm's mode, change
that, and `opbench model` judges a user's BatchNorm by the registry op torch's is judged by.

Each probe runs once per module object (a weak cache): a model of hundreds of modules is probed
once, and only the leaf modules a flagged unit or the self-test asks about."""

from __future__ import annotations

import copy
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accuracy.workflows.model.trace import float64_throughout

WEIGHTS, BIASES = ("weight", "scale", "gamma"), ("bias", "beta", "shift")
# a probed norm's rows: normalized by one factor each to this relative spread, in float64
SAME_FACTOR = 1e-9
# a probed module computes a function when it agrees with it to this normwise relative difference
# in float64: a hand-written constant of 9 digits (sqrt(2 / pi) = 0.797884561) passes; the tanh
# and erf GELUs differ by 8e-5
AGREES = 1e-7
# the activations told by what they compute, each as torch defines it
ACTIVATIONS: dict[str, Callable[[Any], Any]] = {
    "ReLU": F.relu,
    "ReLU6": F.relu6,
    "SiLU": F.silu,
    "Hardswish": F.hardswish,
    "Hardsigmoid": F.hardsigmoid,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
}


@dataclass(frozen=True)
class Kind:
    """The torch module a module computes as (`name`: its class name), and what the catalogue
    reads of it: a GELU's `approximate`, a LeakyReLU's `slope`, a softmax's `dim` (negative: from
    the last), a flatten's `start_dim`, and the attribute names of its `weight` and `bias`."""

    name: str
    approximate: str | None = None
    slope: float | None = None
    dim: int | None = None
    start_dim: int | None = None
    weight: str | None = None
    bias: str | None = None
    torch: Any = field(default=None, compare=False)  # torch's module computing the same, where a probe built one


# the names a probe can tell: a module of another class with one of these names is matched only
# where it computes it (a user's `GELU` that scales by a learned factor is not torch's)
TOLD = frozenset(
    {*ACTIVATIONS, "GELU", "LeakyReLU", "Softmax", "LogSoftmax", "Flatten", "Linear", "Embedding", "LayerNorm",
     "RMSNorm", "LlamaRMSNorm", "Conv2d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "MaxPool2d", "AvgPool2d",
     "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Upsample", "Dropout"}
)  # fmt: skip
# the grids (H, W) a parameterless module is probed on: odd and even, every residue mod 2 and 3, so
# that a pool's floor and ceil modes and its strides give other shapes on one of them
GRIDS = ((13, 14), (17, 19))
# the resizes told apart: (mode, align_corners)
RESIZES = (("nearest", None), ("nearest-exact", None), ("bilinear", False), ("bilinear", True), ("bicubic", False),
           ("bicubic", True))  # fmt: skip
_kinds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_norms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_batch_norms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached(cache: weakref.WeakKeyDictionary, module: Any, probe: Any) -> Any:
    try:
        if module not in cache:
            cache[module] = probe(module)
        return cache[module]
    except TypeError:  # not weakly referable
        return probe(module)


cached = _cached  # one probe per module object, for the probes of other subjects (families.gelu_kind)


def _tensor_name(module: Any, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if isinstance(getattr(module, n, None), torch.Tensor)), None)


def affine(norm: Any) -> tuple[Any, Any]:
    """The norm's weight and bias (None where it has none), by the names they go by."""
    weight, bias = _tensor_name(norm, WEIGHTS), _tensor_name(norm, BIASES)
    return (getattr(norm, weight) if weight else None), (getattr(norm, bias) if bias else None)


def _norm_probe(module: Any) -> tuple[str, float] | None:
    """("rms" or "layer", its epsilon) of a module that normalizes its last dimension, found from
    what it computes in float64 on rows of four scales (the epsilon in closed form from each row's
    one factor); None for any other module."""
    parameters = list(module.parameters())
    weight, bias = affine(module)
    if list(module.children()) or len(parameters) != (weight is not None) + (bias is not None):
        return None
    if any(p.ndim != 1 for p in parameters):
        return None
    shape = getattr(module, "normalized_shape", None)
    width = parameters[0].shape[0] if parameters else int(shape[-1]) if shape else 16
    scales = torch.tensor([[1e-3], [1e-2], [1e-1], [1.0]], dtype=torch.float64)
    x = torch.randn(4, width, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * scales
    try:
        probe = copy.deepcopy(module).double()
        with torch.no_grad(), float64_throughout():
            y = probe(x)
            scale, shift = affine(probe)
            normalized = (y - (0 if shift is None else shift)) / (1 if scale is None else scale)
    except Exception:  # a forward that takes something else: not a norm
        return None
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return None
    return _factor_of_rows(x, normalized)


def _factor_of_rows(x: Any, normalized: Any) -> tuple[str, float] | None:
    """("rms" or "layer", eps) where each row of `normalized` is its row of `x` (centred for
    "layer") over one factor, sqrt(moment + eps), with the same eps in every row."""
    keep = torch.isfinite(normalized).all(0) & (normalized != 0).all(0)
    for kind, centred in (("rms", x), ("layer", x - x.mean(-1, keepdim=True))):
        squared = (centred[:, keep] / normalized[:, keep]).square()  # per row: its moment + eps
        factor = squared.mean(-1)
        if not bool(keep.any()) or not bool((squared.std(-1) <= SAME_FACTOR * factor).all()):
            continue
        eps = factor - centred.square().mean(-1)
        if bool(((eps - eps[0]).abs() <= SAME_FACTOR * factor).all()) and float(eps[0]) >= 0:
            return kind, float(eps[0])
    return None


def probed(module: Any) -> tuple[str, float] | None:
    """`_norm_probe`, once per module object."""
    return _cached(_norms, module, _norm_probe)


def norm_kind(module: Any) -> str | None:
    """ "batch", "group", "layer" or "rms": torch's own norms by class, any other module by what
    it computes; None: not a norm."""
    name = type(module).__name__
    if name.startswith("BatchNorm") and isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batch"
    if isinstance(module, nn.GroupNorm):
        return "group"
    if isinstance(module, nn.LayerNorm):
        return "layer"
    if isinstance(module, getattr(nn, "RMSNorm", ())):
        return "rms"
    found = probed(module)
    if found:
        return found[0]
    return "batch" if _cached(_batch_norms, module, _batch_norm) else None


def _agrees(y: Any, wanted: Any) -> bool:
    if not isinstance(y, torch.Tensor) or y.shape != wanted.shape or not bool(torch.isfinite(y).all()):
        return False
    scale = float(wanted.abs().max()) or 1.0
    return float((y - wanted).abs().max()) <= AGREES * scale


def _run64(module: Any, x: Any, train: bool | None = None) -> Any:
    """The module's forward on `x` in float64 (its floating parameters and buffers widened), run on
    a copy that shares its parameters: a forward that keeps state (a step count, a cache buffer)
    leaves the user's module as it was; None where it raises. `train`: the copy in that mode."""
    try:
        probe = copy.deepcopy(module, {id(p): p for p in module.parameters()})
        if train is not None:
            probe.train(train)
        stored = [*probe.named_parameters(), *probe.named_buffers()]
        held = {n: t.double() if t.is_floating_point() else t for n, t in stored}
        with torch.no_grad(), float64_throughout():
            return torch.func.functional_call(probe, held, (x,))
    except Exception:  # a forward that takes something else, a module that does not copy: not this kind
        return None


def _activation(module: Any) -> Kind | None:
    """An elementwise activation, a softmax over one axis, or a flatten from axis 1, by its output
    on float64 values over [-8, 8] (past ReLU6's and the hard sigmoid's corners)."""
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 4
    y = _run64(module, x)
    if y is None:
        return None
    if _agrees(y, x.flatten(1)):
        return Kind("Flatten", start_dim=1)
    for approximate in ("none", "tanh"):
        if _agrees(y, F.gelu(x, approximate=approximate)):
            return Kind("GELU", approximate=approximate)
    found = next((name for name, f in ACTIVATIONS.items() if _agrees(y, f(x))), None)
    if found:
        return Kind(found)
    negative = x < 0
    if isinstance(y, torch.Tensor) and y.shape == x.shape and _agrees(y[~negative], x[~negative]):
        slope = float((y[negative] / x[negative]).mean())
        if slope not in (0.0, 1.0) and _agrees(y, F.leaky_relu(x, slope)):
            return Kind("LeakyReLU", slope=slope)
    for dim in (-1, -2, -3):
        for name, f in (("Softmax", F.softmax), ("LogSoftmax", F.log_softmax)):
            if _agrees(y, f(x, dim)):
                return Kind(name, dim=dim)
    return None


def _conv2d(module: Any, w: Any, b: Any) -> bool:
    """Whether the module computes a 2-D convolution by its (out, in / groups, kh, kw) weight: its
    stride, padding, dilation and groups its own attributes where it keeps them, else torch's
    defaults, or the padding that keeps the size (kernel // 2) written in its forward."""
    groups = getattr(module, "groups", 1)
    if not isinstance(groups, int) or groups < 1 or w.shape[0] % groups:
        return False
    x = torch.randn(1, w.shape[1] * groups, 9, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = _run64(module, x)
    if not isinstance(y, torch.Tensor):
        return False
    options = {name: getattr(module, name, default) for name, default in (("stride", 1), ("dilation", 1))}
    own = getattr(module, "padding", None)
    paddings: list[Any] = [own] if own is not None else [0, (w.shape[2] // 2, w.shape[3] // 2)]
    for padding in paddings:
        try:
            wanted = F.conv2d(x, w, b, padding=padding, groups=groups, **options)
        except (RuntimeError, TypeError, ValueError):  # attributes that are no convolution's
            return False
        if _agrees(y, wanted):
            return True
    return False


def _weighted(module: Any) -> Kind | None:
    """A Linear (forward x W^T + b of the (out, in) weight and (out,) bias it holds), a Conv2d
    (a (out, in, kh, kw) weight) or an Embedding (forward: the weight's rows at integer ids)."""
    parameters = dict(module.named_parameters())
    matrices = [n for n, p in parameters.items() if p.ndim in (2, 4) and p.is_floating_point()]
    if len(matrices) != 1 or len(parameters) > 2:
        return None
    weight = matrices[0]
    rows, columns = parameters[weight].shape[:2]
    bias = next((n for n, p in parameters.items() if n != weight and p.shape == (rows,)), None)
    if len(parameters) == 2 and bias is None:
        return None
    w = parameters[weight].detach().double()
    b = parameters[bias].detach().double() if bias else None
    if w.ndim == 4:
        return Kind("Conv2d", weight=weight, bias=bias) if _conv2d(module, w, b) else None
    x = torch.randn(3, columns, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    if _agrees(_run64(module, x), F.linear(x, w, b)):
        return Kind("Linear", weight=weight, bias=bias)
    ids = torch.tensor([[0, rows - 1, rows // 2]])
    if bias is None and _agrees(_run64(module, ids), w[ids]):
        return Kind("Embedding", weight=weight)
    return None


def _own(module: Any) -> Kind:
    """A torch module's kind, read from its attributes."""
    return Kind(
        type(module).__name__,
        approximate=getattr(module, "approximate", None),
        slope=getattr(module, "negative_slope", None),
        dim=getattr(module, "dim", None),
        start_dim=getattr(module, "start_dim", None),
        weight=_tensor_name(module, ("weight",)),
        bias=_tensor_name(module, ("bias",)),
    )


def _probe(module: Any) -> Kind | None:
    if type(module).__module__.split(".")[0] == "torch":
        return _own(module)
    if list(module.children()):
        return None
    norm = norm_kind(module)
    if norm in ("layer", "rms"):
        return Kind("LayerNorm" if norm == "layer" else "RMSNorm", weight=_tensor_name(module, WEIGHTS),
                    bias=_tensor_name(module, BIASES))  # fmt: skip
    if norm == "batch":
        return _cached(_batch_norms, module, _batch_norm)
    if any(True for _ in module.parameters()):
        return _weighted(module)
    if any(t.is_floating_point() for t in module.buffers()):
        return None  # statistics or a table of its own: no pool, resize, dropout or activation holds one
    return _activation(module) or _over_grid(module)


def _rounded(value: float, tolerance: float) -> float:
    """The value with the fewest significant digits (up to 6) within `tolerance` of `value`: a
    probe finds 1e-05 as 1.0000000000023e-05, and torch's eps is compared with ==."""
    return next((r for r in (float(f"{value:.{d}g}") for d in range(1, 7)) if abs(r - value) <= tolerance), value)


def _per_channel(module: Any, channels: int) -> tuple[Any, Any, int] | None:
    """(x, the module's float64 output on it, x's rank): x of shape (8, channels, 3, channels + 1)
    or its first 3 or 2 axes, the first rank the module maps to its own shape (a spatial axis of
    another length than the channels: a (C,) statistic that broadcasts against the last axis fails)."""
    grid = torch.randn(8, channels, 3, channels + 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for x in (grid, grid[..., 0], grid[:, :, 0, 0]):
        y = _run64(module, x)
        if isinstance(y, torch.Tensor) and y.shape == x.shape:
            return x, y, x.ndim
    return None


def _statistics(held: dict[str, Any], scale: Any, shift: Any) -> tuple[float, tuple[str, ...]] | None:
    """(eps, the names of (mean, var, weight or "", bias or "")) where the module's per-channel
    map y = scale x + shift is (x - mean) / sqrt(var + eps) * weight + bias of its tensors, one
    eps for every channel; the running statistics as buffers and the affine parameters as
    parameters, and by their names, first."""
    found = []
    for order in itertools.permutations(held):
        mean, var, *rest = order
        for weight, bias in [(rest[0], ""), ("", rest[0])] if len(rest) == 1 else [(*rest, "", "")[:2]]:
            m, v = held[mean], held[var]
            w = held[weight] if weight else torch.ones_like(v)
            total = (w / scale).square()  # var + eps, channel by channel
            eps = total - v
            b = held[bias] if bias else torch.zeros_like(v)
            if not bool((w / scale > 0).all()) or not bool(((eps - eps[0]).abs() <= SAME_FACTOR * total).all()):
                continue
            if float(eps[0]) < -SAME_FACTOR * float(total[0]) or not _agrees(shift, b - m * scale):
                continue
            names = (mean, var, weight, bias)
            unlike = ("mean" not in mean.lower(), "var" not in var.lower(), weight not in ("", *WEIGHTS),
                      bias not in ("", *BIASES))  # fmt: skip
            found.append((sum(unlike), _rounded(max(float(eps[0]), 0.0), SAME_FACTOR * float(total.max())), names))
    return min(found)[1:] if found else None


def _holds_statistics(module: Any) -> bool:
    """Whether the module, a leaf, holds two to four floating tensors, all 1-D of one length, and
    no other floating tensor: what a BatchNorm holds (without running its forward)."""
    floats = [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]
    shapes = {t.shape for t in floats}
    return not list(module.children()) and 2 <= len(floats) <= 4 and len(shapes) == 1 and len(shapes.pop()) == 1


def _batch_norm(module: Any) -> Kind | None:
    """A BatchNorm in evaluation mode: a leaf holding two to four 1-D tensors of one length C and
    no other, that maps each channel (axis 1) by an affine function (x - mean) / sqrt(var + eps) *
    w + b of them, under whatever names, its eps wherever it keeps it (found from what it computes);
    `Kind.torch` is torch's BatchNorm on the same tensors."""
    if not _holds_statistics(module):
        return None
    named = [*module.named_parameters(), *module.named_buffers()]
    held = {n: t.detach().double() for n, t in named if t.is_floating_point()}
    channels = next(iter(held.values())).shape[0]
    probe = _per_channel(module, channels)
    if probe is None:
        return None
    x, y, rank = probe
    xs, ys = (t.transpose(0, 1).reshape(channels, -1) for t in (x, y))
    centred = xs - xs.mean(1, keepdim=True)
    scale = (centred * (ys - ys.mean(1, keepdim=True))).sum(1) / centred.square().sum(1)
    shift = ys.mean(1) - scale * xs.mean(1)
    if not _agrees(ys, scale[:, None] * xs + shift[:, None]) or not bool((scale != 0).all()):
        return None
    found = _statistics(held, scale, shift)
    if found is None:
        return None
    eps, (mean, var, weight, bias) = found
    tensors = dict(named)
    norm = getattr(nn, f"BatchNorm{max(rank - 2, 1)}d")(channels, eps=eps, affine=bool(weight or bias))
    norm.running_mean, norm.running_var = tensors[mean].detach(), tensors[var].detach()
    for part, name in (("weight", weight), ("bias", bias)):
        if name:
            setattr(norm, part, nn.Parameter(tensors[name].detach(), requires_grad=False))
    norm.train(module.training)
    return Kind(type(norm).__name__, weight=weight or None, bias=bias or None, torch=norm)


def _grids() -> list[Any]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, h, w, generator=generator, dtype=torch.float64) for h, w in GRIDS]


def _gives(candidate: Any, xs: list[Any], ys: list[Any]) -> bool:
    with torch.no_grad():
        try:
            return all(_agrees(y, candidate(x)) for x, y in zip(xs, ys, strict=True))
        except (RuntimeError, ValueError):  # a geometry torch refuses on this grid
            return False


def _pooled(size: tuple[int, ...], kernel: int, stride: int, padding: int, ceil: bool) -> tuple[int, ...]:
    """The output size of a pool of this geometry, as torch's shape rule gives it (in ceil mode, the
    last window starts inside the input or its left padding)."""
    out = []
    for n in size:
        span = n + 2 * padding - kernel
        count = (-(-span // stride) if ceil else span // stride) + 1
        out.append(count - 1 if ceil and (count - 1) * stride >= n + padding else count)
    return tuple(out)


def _pools(xs: list[Any], ys: list[Any]) -> Any:
    """torch's max or average pool over a square window that gives `ys` on `xs`: adaptive where
    the output's size is the same on both grids, else the first geometry (kernel 2 to 7, a stride
    up to the kernel, padding up to half of it, floor then ceil mode, padding counted then not)."""
    if ys[0].shape[2:] == ys[1].shape[2:]:
        size = tuple(ys[0].shape[2:])
        adaptive = (nn.AdaptiveAvgPool2d(size), nn.AdaptiveMaxPool2d(size))
        return next((p for p in adaptive if _gives(p, xs, ys)), None)
    sizes = [tuple(x.shape[2:]) for x in xs]
    for kernel in range(2, 8):
        geometries = itertools.product(range(1, kernel + 1), range(kernel // 2 + 1), (False, True))
        for stride, padding, ceil in geometries:
            if [_pooled(size, kernel, stride, padding, ceil) for size in sizes] != [tuple(y.shape[2:]) for y in ys]:
                continue  # its output is of another size: not run
            averages = (nn.AvgPool2d(kernel, stride, padding, ceil, counted) for counted in (True, False))
            pools = (nn.MaxPool2d(kernel, stride, padding, ceil_mode=ceil), *averages)
            found = next((p for p in pools if _gives(p, xs, ys)), None)
            if found is not None:
                return found
    return None


def _resize(xs: list[Any], ys: list[Any]) -> Any:
    """torch's Upsample that gives `ys` on `xs`: to a fixed size where the output's is the same on
    both grids, else by a scale factor (the ratio of sizes on the first grid, or its roundings)."""
    out, given = ys[0].shape[2:], xs[0].shape[2:]
    ratios = [o / i for o, i in zip(out, given, strict=True)]
    scales = {tuple(ratios), *(tuple(float(f"{r:.{d}g}") for r in ratios) for d in (1, 2, 3))}
    options = [{"size": tuple(out)}] if ys[0].shape[2:] == ys[1].shape[2:] else []
    options += [{"scale_factor": s} for s in sorted(scales)]
    for option, (mode, corners) in itertools.product(options, RESIZES):
        resize = nn.Upsample(mode=mode, align_corners=corners, **option)
        if _gives(resize, xs, ys):
            return resize
    return None


def _dropout(module: Any) -> Any:
    """torch's Dropout(p) where the module in train mode zeroes some elements of a tensor of ones
    and scales the rest by one factor 1 / (1 - p) (run under a forked random state, seeded: the
    user's is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        y = _run64(module, torch.ones(16, 64, dtype=torch.float64), train=True)
    if not isinstance(y, torch.Tensor) or y.shape != (16, 64):
        return None
    kept = y[y != 0]
    if kept.numel() in (0, y.numel()) or not bool((kept == kept[0]).all()) or not float(kept[0]) > 1:
        return None
    return nn.Dropout(_rounded(1 - 1 / float(kept[0]), 1e-9))


def _over_grid(module: Any) -> Kind | None:
    """A parameterless module by what it makes of (1, 2, H, W) grids: the identity a Dropout (in
    eval), a grid of another size a pool or a resize."""
    xs = _grids()
    ys = [_run64(module, x) for x in xs]
    if not all(
        isinstance(y, torch.Tensor) and y.ndim == 4 and y.shape[:2] == x.shape[:2] for x, y in zip(xs, ys, strict=True)
    ):
        return None
    if all(_agrees(y, x) for x, y in zip(xs, ys, strict=True)):
        found = _dropout(module)
    else:
        larger = any(o > i for o, i in zip(ys[0].shape[2:], xs[0].shape[2:], strict=True))
        found = (None if larger else _pools(xs, ys)) or _resize(xs, ys)
    return Kind(type(found).__name__, torch=found) if found is not None else None


def as_torch(module: Any) -> Any:
    """torch's own module that computes what `module` does, where a probe built one (a user's
    pool, resize, dropout or BatchNorm); else the module itself."""
    found = kind_of(module)
    return found.torch if found is not None and found.torch is not None else module


def judged_as(module: Any) -> Any:
    """The module a unit of one call of `module` is judged as: torch's BatchNorm for a user's
    (`opbench model` judges it by the registry op torch's is judged by), else the module itself;
    only a module that holds what a BatchNorm holds is probed."""
    if type(module).__module__.split(".")[0] == "torch" or not _holds_statistics(module):
        return module
    return as_torch(module)


def kind_of(module: Any) -> Kind | None:
    """What `module` computes as, once per module object: torch's own by class, a leaf of another
    class by its probe, else by its class name where no probe tells that name (a plugin's own
    kinds, opbench's `ModelInput`); None: nothing the catalogue knows."""
    if not isinstance(module, nn.Module):
        return None
    found = _cached(_kinds, module, _probe)
    if found is not None or type(module).__name__ in TOLD:
        return found
    return Kind(type(module).__name__, weight=_tensor_name(module, ("weight",)), bias=_tensor_name(module, ("bias",)))


def kind_name(module: Any) -> str | None:
    found = kind_of(module)
    return found.name if found else None


def described(module: Any) -> str:
    """The module's class, and the kind it computes as where that is another name: `Swish (a SiLU)`."""
    own, kind = type(module).__name__, kind_name(module)
    return own if kind in (None, own) else f"{own} (a {kind})"


def held(module: Any, part: str) -> Any:
    """The module's weight or bias (`part`), wherever its kind says it keeps it; None: none."""
    found = kind_of(module)
    name = getattr(found, part, None) if found else None
    return getattr(module, name) if name else None
