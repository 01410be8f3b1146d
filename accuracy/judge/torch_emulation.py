"""Monte Carlo arithmetic for a torch function: the typical tier of `opbench check --fn`.

A registry op's typical tier re-runs its numpy formula with rounded arithmetic
(accuracy.judge.emulation). A user's torch function cannot be run by numpy, but torch shows every ATen
operation it calls (a TorchDispatchMode). Each one is evaluated in float64 and given the
rounding error a working-precision kernel makes, sampled as emulate's mode "random" does:

- pointwise ops (tagged `torch.Tag.pointwise`): one rounding, uniform in +-ulp/2 for IEEE
  operations and +-LIBM_ULPS ulp for libm functions; sign changes and copies are exact;
- sums and contractions (sum, mean, average pools, mm, addmm, bmm, baddbmm, mv, addmv, dot, convolution): a
  Gaussian error with the variance of recursive summation over their terms
  (emulate.recursive_sum_variance) plus each product's rounding; the op itself, run on the
  terms squared and on ones, gives the sum of squares and the number of terms per output;
- views and reshapes: exact;
- selections (max pooling, amax): exact;
- a fused kernel that torch can decompose (aten.native_layer_norm, aten._softmax, var_mean): the
  ops of torch's own decomposition (torch._decomp), each modelled as above, so that its internal
  sums count; its intermediates stay at compute precision and only its result is stored;
- any other op: one rounding of its result, and the verdict's reason names it, since its
  internal sums are not modelled.

Where CUDA's TF32 mode is on, a contraction's products take their inputs rounded to TF32 first
(cuBLAS rounds to nearest even, cuDNN to nearest: measured on an H200, docs/gpu.md): each
product then carries two TF32 roundings besides the float32 accumulation.

Each result is then stored in the function's dtype: torch computes float16/bfloat16 in float32
(`at::opmath_type`, accuracy.judge.precision) and rounds every op's result to storage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from accuracy.core.dtypes import FORMATS, FloatFormat, ulp
from accuracy.judge import kernels
from accuracy.judge.emulation import LIBM_ULPS, ROUNDING_VARIANCE, recursive_sum_variance
from accuracy.judge.precision import LOW_PRECISION

IEEE_OPS = {"add", "sub", "rsub", "mul", "div", "sqrt", "reciprocal", "square", "addcmul", "addcdiv"}
EXACT_OPS = {
    "neg",
    "abs",
    "relu",
    "clone",
    "copy",
    "copy_",
    "_to_copy",
    "maximum",
    "minimum",
    "clamp",
    "clamp_min",
    "clamp_max",
    "where",
    "sign",
    "fill",
    "fill_",
    "zero_",
    "zeros_like",
    "ones_like",
    "empty_like",
    "masked_fill",
    "alias",
    "lift_fresh",
    "detach",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "amax",
    "amin",
    "convert_element_type",
}
SUMS = {"sum", "mean", "avg_pool1d", "avg_pool2d", "avg_pool3d"}
AVERAGES = SUMS - {"sum"}  # a sum divided by its count of terms
CONTRACTIONS = {"mm", "addmm", "bmm", "baddbmm", "mv", "addmv", "dot", "vdot", "convolution", "_convolution"}


# pointwise kernels that compute a formula whose steps cancel: GELU's 1 + erf(x / sqrt 2) (or
# 1 + tanh(...)) for negative x, where one ulp of erf's result is many ulps of the output (16 at
# x = -1.9, ~1000 at -3). One rounding of the result would miss what every correct kernel (torch's,
# ONNX Runtime's) errs by there; they are modelled as torch's decomposition, each step rounded.
# The hard sigmoid and hard swish are modelled as ONNX defines them, clip(x * (1/6) + 0.5, 0, 1)
# (ONNX Runtime's and OpenVINO's kernels): near x = -3 its sum cancels (x * (1/6)'s rounding is ~15
# ulps of the result at x = -2.9), where torch's relu6(x + 3) / 6 is exact. Both are correct kernels,
# so the wider of the two is the one modelled (their ops run as ONNX_FORMULAS, not torch's decomposition).
def _hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x * (1 / 6) + 0.5, 0.0, 1.0)


def _hard_swish(x: torch.Tensor) -> torch.Tensor:
    return x * _hard_sigmoid(x)


ONNX_FORMULAS: dict[Any, Callable[[torch.Tensor], torch.Tensor]] = {
    torch.ops.aten.hardsigmoid.default: _hard_sigmoid,
    torch.ops.aten.hardswish.default: _hard_swish,
    torch.ops.aten.hardsigmoid_.default: lambda x: x.copy_(_hard_sigmoid(x)),
    torch.ops.aten.hardswish_.default: lambda x: x.copy_(_hard_swish(x)),
}
FORMULA_OPS = {"gelu", *(op.overloadpacket.__name__ for op in ONNX_FORMULAS)}


# BatchNorm in eval mode, as ATen's CPU kernel computes it (batch_norm_kernel.cpp) and as ONNX
# Runtime and OpenVINO fold it: alpha = w / sqrt(var + eps), beta = b - mean * alpha, then
# x * alpha + beta. torch._decomp's (x - mean) * invstd * w + b errs relative to |x - mean|; the
# folded form relative to |x * alpha| + |beta|, many times more where x is near the mean
# (EfficientNet-B5's eps=1e-3 BatchNorms on OpenVINO: 1.04-1.66x the direct form's threshold).
# alpha's own rounding reaches both terms; to first order it is (x - mean) * (its error), added
# once, so that the first-order propagation can follow it (at the cost of one more rounding of y).
def _folded_batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if training or running_mean is None or running_var is None:
        decomposition = decomposition_table[torch.ops.aten.native_batch_norm.default]
        return decomposition(x, weight, bias, running_mean, running_var, training, momentum, eps)
    channels = (1, -1, *([1] * (x.dim() - 2)))

    def scale() -> torch.Tensor:
        inverse = 1 / torch.sqrt(running_var + eps)
        return inverse if weight is None else inverse * weight

    rounded = scale()
    with _disable_current_modes():  # the exact alpha and x - mean, carrying no rounding
        alpha = scale()
        deviation = x - running_mean.reshape(channels)
    shift = running_mean * alpha
    beta = -shift if bias is None else bias - shift
    folded = x * alpha.reshape(channels) + beta.reshape(channels)
    return folded + deviation * (rounded - alpha).reshape(channels), x.new_zeros((0,)), x.new_zeros((0,))


KERNEL_FORMS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.native_batch_norm.default: _folded_batch_norm,
    torch.ops.aten._native_batch_norm_legit_no_training.default: (
        lambda x, weight, bias, mean, var, momentum, eps: _folded_batch_norm(
            x, weight, bias, mean, var, False, momentum, eps
        )
    ),
}
MOVING_OPS = {
    "cat",
    "stack",
    "contiguous",
    "index_select",
    "embedding",
    "gather",
    "select",
    "slice",
    "expand",
    "repeat",
    "_unsafe_view",
    "reshape",
    "flatten",
    "t",
    "transpose",
    "permute",
    "split",
    "split_with_sizes",
    "unbind",
    "chunk",
    "narrow",
    "constant_pad_nd",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "new_zeros",
    "new_ones",
    "new_empty",
    "new_full",
    "scalar_tensor",
    "_local_scalar_dense",
    "broadcast_in_dim",
}


def _floats(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if type(value) is torch.Tensor:  # most ops give one tensor: tree_map's flattening cost more than its rounding
        return fn(value) if value.is_floating_point() else value
    return tree_map(lambda t: fn(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, value)


class _EagerMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    """A mode that only ever watches eager calls. torch wraps a mode's `__torch_dispatch__` so that
    torch.compile skips it, and that wrapper imports torch._dynamo on the first op dispatched:
    1.5 s of every `opbench model` and `check --fn` that has no use for the compiler. The opt-out
    is the one torch's TorchDispatchMode documents for mode authors (`_should_skip_dynamo`)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class _Rounding(_EagerMode):
    """What both ways of modelling a function's roundings share: the formats, the variance of a
    sum or contraction's roundings, fused kernels run as their decompositions, and the count of
    roundings."""

    def __init__(self, storage: FloatFormat, products: FloatFormat | None, terms: dict[Any, torch.Tensor] | None):
        super().__init__()  # type: ignore[no-untyped-call]
        self.terms = {} if terms is None else terms  # each contraction's count of terms, by its shapes
        self.storage = storage
        self.compute = FORMATS["float32"] if storage.name in LOW_PRECISION else storage
        self.products = products  # the format a contraction rounds its products' inputs to (TF32), if any
        self.unmodelled: set[str] = set()
        self.contracted: set[str] = set()  # the contractions that ran, for the verdict's reason
        self._fused = 0  # depth inside a decomposed fused kernel, whose intermediates are not stored
        # every rounding sampled, over all elements: an upper bound on those any one output element
        # depends on, for the typical tier's worst case (accuracy.judge.verdicts, docs/verdicts.md)
        self.roundings = 0

    def _sum_variance(
        self, func: Any, args: Any, kwargs: dict[str, Any], out: torch.Tensor
    ) -> tuple[np.ndarray, float]:
        """(the variance of a sum or contraction's rounding errors per element, as a sum's: the
        mean's is this over scale**2; scale): recursive summation's variance plus each product's
        rounding; the op itself, run on the terms squared and on ones, gives the sum of squares and
        the number of terms per output (the ones' only depend on shapes, so they are computed once)."""
        squares = func(*_floats(args, torch.square), **kwargs)
        key = _shape_key(func, args, kwargs)
        terms = self.terms.get(key) if key is not None else None
        if terms is None:
            terms = func(*_floats(args, torch.ones_like), **kwargs)
            if key is not None:
                self.terms[key] = terms
        total, scale = out, 1.0
        if func.overloadpacket.__name__ in AVERAGES:
            scale = _count(func, args, out)
            total, squares, terms = out * scale, squares * scale, terms * scale
        total64, squares64, terms64 = (
            np.asarray(v.detach().numpy(), dtype=np.float64) for v in (total, squares, terms)
        )
        variance = recursive_sum_variance(total64, squares64, terms64, self.compute)
        looped = _looped_sum_error(func, args, kwargs, self.compute)
        if looped is not None:  # the loop's error where its roundings are not random: beyond 4 of their SDs
            looped = np.square(looped).reshape(variance.shape)
            variance = np.where(looped > COHERENT**2 * variance, looped, variance)
        self.roundings += int(np.sum(terms64))  # one per addition
        if func.overloadpacket.__name__ in CONTRACTIONS:
            self.roundings += int(np.sum(terms64)) * (3 if self.products is not None else 1)  # and per product
            variance = variance + ROUNDING_VARIANCE * self.compute.u**2 * squares64  # each product rounded
            self.contracted.add(f"aten.{func.overloadpacket.__name__}")
            if self.products is not None:  # and each of its two inputs rounded before
                variance = variance + 2 * ROUNDING_VARIANCE * self.products.u**2 * squares64
        return variance, scale

    def _decomposed(self, name: str, decomposition: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
        """A fused kernel run as its decomposition, back through this mode: its steps are the
        kernel's own (accuracy.judge.kernels.inside)."""
        self._fused += 1
        try:
            with self, kernels.inside(name):
                return decomposition(*args, **kwargs)
        finally:
            self._fused -= 1


class _MonteCarlo(_Rounding):  # type: ignore[no-untyped-call]  # torch leaves the mode unannotated
    """Every ATen op's float64 result plus a sampled working-precision rounding error."""

    def __init__(
        self,
        storage: FloatFormat,
        rng: np.random.Generator,
        products: FloatFormat | None = None,
        terms: dict[Any, torch.Tensor] | None = None,
        sums: list[tuple[Any, np.ndarray, int]] | None = None,
    ):
        super().__init__(storage, products, terms)
        self.rng = rng
        # each rounding's place in the function with its spacing (a sum's: its error's standard
        # deviation and count of roundings): shared by the runs, so that only the first computes
        # ulps and runs each sum on the squares of its terms
        self.sums: list[tuple[Any, np.ndarray, int]] = [] if sums is None else sums
        self._nth = 0

    def _uniform(self, t: torch.Tensor, half_width: float, fmt: FloatFormat, absolute: float = 0.0) -> torch.Tensor:
        """`t` rounded once: an error uniform in +-half_width ulp of the value the first run had at
        the same place (the runs' values differ by O(u): the same ulp but within u of a power of 2),
        or in +-`absolute` where that is wider (a kernel's approximation, accuracy.judge.kernels)."""
        values = t.detach().numpy()
        self.roundings += values.size
        place, self._nth = self._nth, self._nth + 1
        if place < len(self.sums) and self.sums[place][0] == (fmt.name, values.shape):
            spacing = self.sums[place][1]
        else:
            spacing = ulp(values, fmt)
            if place == len(self.sums):
                self.sums.append(((fmt.name, values.shape), spacing, 0))
        if absolute:
            noise = self.rng.uniform(-1.0, 1.0, values.shape)
            noise *= np.maximum(half_width * spacing, absolute)
        else:
            noise = self.rng.uniform(-half_width, half_width, values.shape)
            noise *= spacing  # in place: an attention's scores are 16 M values at 2,048 tokens
        return _plus(t, noise)

    def _stored(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.storage is self.compute or self._fused else self._uniform(t, 0.5, self.storage)

    def _summed(self, func: Any, args: Any, kwargs: dict[str, Any], out: torch.Tensor) -> torch.Tensor:
        """A sum or contraction's result with a Gaussian error of recursive summation's variance:
        the variance the first run found for the same op at the same place in the function, which
        differs from this run's own only by the O(u) relative errors of its operands."""
        place, self._nth = self._nth, self._nth + 1
        if place < len(self.sums) and self.sums[place][0] == (func, tuple(out.shape)):
            _, std, roundings = self.sums[place]
            self.roundings += roundings
        else:
            before = self.roundings
            variance, scale = self._sum_variance(func, args, kwargs, out)
            std = np.sqrt(variance) / scale
            if place == len(self.sums):
                self.sums.append(((func, tuple(out.shape)), std, self.roundings - before))
        noise = self.rng.standard_normal(np.shape(std))
        noise *= std
        return _plus(out, np.asarray(noise))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if func.is_view or name in MOVING_OPS or name in EXACT_OPS:
            return func(*args, **kwargs)
        fused = _fused_kernel(func, name)
        decomposition = _decomposition(func) if fused else None
        if decomposition is not None:
            return _floats(self._decomposed(name, decomposition, args, kwargs), self._stored)
        out = func(*args, **kwargs)
        if not _gives_floats(out):
            # nothing to round, and no op of the function's arithmetic: an index, a count, or an
            # op a finalizer dispatched when the garbage collector ran mid-run (LibTorch's
            # script_free: the reason said "modelled as one rounding each: aten.script_free")
            return out
        if name in SUMS or name in CONTRACTIONS:
            return self._stored(self._summed(func, args, kwargs, out))
        if name in IEEE_OPS or torch.Tag.pointwise in func.tags:  # torch's decompositions call prims.div, untagged
            width = 0.5 if name in IEEE_OPS else LIBM_ULPS
        else:
            self.unmodelled.add(f"aten.{name}")
            width = 0.5
        absolute, width = kernels.absolute_error(name), kernels.step_ulps(name, width)
        return _floats(out, lambda t: self._stored(self._uniform(t, width, self.compute, absolute)))


def _plus(t: torch.Tensor, noise: np.ndarray) -> torch.Tensor:
    """`t + noise`, written into the noise's own array where that gives the same tensor: a new
    array of an attention's 16 M scores costs more than the addition (page faults: 126 ms against
    33 ms here), and these sums run tens of times per Monte Carlo run."""
    added = torch.from_numpy(noise)
    if added.dtype != t.dtype or added.shape != t.shape or not t.is_contiguous():
        return t + added.to(t.dtype)
    return added.add_(t)


def _formula(name: str) -> bool:
    """Whether the op runs as a formula kernel (FORMULA_OPS), or through an approximation in force."""
    return name in FORMULA_OPS or kernels.expanded(name)


def _gives_floats(out: Any) -> bool:
    if type(out) is torch.Tensor:  # one tensor, as `_floats`
        return out.is_floating_point()
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in tree_flatten(out)[0])


def _fused_kernel(func: Any, name: str) -> bool:
    """Whether `func` is modelled as the ops of its decomposition rather than as one rounding."""
    return _formula(name) or not (
        name in SUMS or name in CONTRACTIONS or name in IEEE_OPS or torch.Tag.pointwise in func.tags
    )


def _shape_key(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """What an op run on ones depends on: the op, its tensors' shapes and dtypes and its other
    arguments; None where an argument is not a plain value."""
    leaves, spec = tree_flatten((args, kwargs))
    key: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if not leaf.is_floating_point():
                return None  # an integer tensor's values matter (an index)
            key.append((tuple(leaf.shape), leaf.dtype))
        elif isinstance(leaf, (type(None), bool, int, float, str, torch.dtype, torch.device, torch.memory_format)):
            key.append(leaf)
        else:
            return None
    return (func, str(spec), tuple(key))


def _decomposition(func: Any) -> Callable[..., Any] | None:
    """torch's decomposition of a fused kernel (torch._decomp), or None; prims.var, where torch's
    decompositions of var, var_mean and std end, has none of its own and runs as its two passes;
    the hard sigmoid and hard swish run as ONNX's formula (FORMULA_OPS), an eval-mode BatchNorm as
    the kernels fold it (KERNEL_FORMS)."""
    if func is torch.ops.prims.var.default:
        return _two_pass_variance
    return ONNX_FORMULAS.get(func) or KERNEL_FORMS.get(func) or decomposition_table.get(func)


def _two_pass_variance(
    a: torch.Tensor, dims: list[int] | None, correction: float, *, output_dtype: Any = None
) -> torch.Tensor:
    """prims.var as the two-pass sums it computes, so that each is modelled."""
    dims = list(range(a.ndim)) if dims is None else list(dims)
    count = int(np.prod([a.shape[d] for d in dims]))
    deviations = a - torch.mean(a, dims, keepdim=True)
    return torch.sum(deviations * deviations, dims) / (count - correction)


def monte_carlo_runs(
    fn: Callable[..., torch.Tensor],
    inputs64: dict[str, np.ndarray],
    storage: FloatFormat,
    seeds: list[Any],
    products: FloatFormat | None = None,
) -> tuple[list[np.ndarray], set[str], set[str], int]:
    """`fn` run once per seed with sampled working-precision rounding errors (`products`: the
    format contractions round their products' inputs to, TF32 under CUDA's TF32 mode): the results
    as float64 arrays, the ops modelled as one rounding only, the contractions that ran, and the
    number of roundings a run samples (over all elements)."""
    runs = MonteCarloRuns(fn, inputs64, storage, products)
    runs.extend(seeds)
    return runs.results, runs.unmodelled, runs.contracted, runs.roundings


class MonteCarloRuns:
    """Monte Carlo runs of `fn` that can be continued: a later `extend` shares the first run's
    ulps and sums, so 16 runs then 48 more are bitwise the 64 runs of one call."""

    def __init__(
        self,
        fn: Callable[..., torch.Tensor],
        inputs64: dict[str, np.ndarray],
        storage: FloatFormat,
        products: FloatFormat | None = None,
    ):
        self.fn, self.inputs64, self.storage, self.products = fn, inputs64, storage, products
        self.results: list[np.ndarray] = []
        self.unmodelled: set[str] = set()
        self.contracted: set[str] = set()
        self.roundings = 0
        self._terms: dict[Any, torch.Tensor] = {}  # shared by the runs: they only depend on the ops' shapes
        self._sums: list[tuple[Any, np.ndarray, int]] = []

    def extend(self, seeds: list[Any]) -> None:
        for seed in seeds:
            mode = _MonteCarlo(self.storage, np.random.default_rng(seed), self.products, self._terms, self._sums)
            with np.errstate(all="ignore"), mode:
                out = self.fn(**{k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in self.inputs64.items()})
            self.results.append(np.asarray(out.detach().numpy(), dtype=np.float64))
            self.unmodelled |= mode.unmodelled
            self.contracted |= mode.contracted
            self.roundings = max(self.roundings, mode.roundings)


class NotFirstOrder(Exception):
    """The function's rounding errors cannot be propagated exactly here: one error reaching an op
    twice (x * x, a residual around a noisy branch), a contraction or sum of correlated errors, a
    selection that depends on noisy values (max pooling, a comparison). Its Monte Carlo runs do it."""


@dataclass(frozen=True)
class _Spread:
    """A tensor's error in the first-order model: E[error**2] per element, whether its elements'
    errors are mutually independent, and the roundings (numbered) they come from."""

    second: torch.Tensor
    independent: bool
    sources: frozenset[int]
    centred: bool = True  # its mean is zero (to first order): second moments of independent errors add


_SPREAD = "_opbench_spread"  # the attribute a tensor's _Spread rides on inside the mode
# ops that move each element to at most one place: their errors stay independent
PERMUTING = {
    "view",
    "_unsafe_view",
    "reshape",
    "flatten",
    "t",
    "transpose",
    "permute",
    "select",
    "slice",
    "narrow",
    "unsqueeze",
    "squeeze",
    "split",
    "split_with_sizes",
    "unbind",
    "chunk",
    "contiguous",
    "clone",
    "alias",
    "lift_fresh",
    "detach",
    "_to_copy",
    "to",
    "convert_element_type",
}
# ops that give each output element one input element, some more than once (or a constant)
SELECTIONS = {"expand", "repeat", "cat", "stack", "index_select", "gather", "constant_pad_nd"}
VALUE_FREE = {"zeros_like", "ones_like", "empty_like", "new_zeros", "new_ones", "new_empty", "new_full"}
ADDITIVE = {"addmm": 0, "addmv": 0, "baddbmm": 0, "convolution": 2, "_convolution": 2}  # the bias argument


KINK_SIGMAS = 8.0  # relu's input this many RMS errors from 0 or more: relu passes the error or none of it


def _relu_second(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """E[(relu(x + d) - relu(x))**2] for d ~ N(0, sigma**2): sigma**2 ((t**2 + 1) Phi(t) + t phi(t))
    for x < 0 and sigma**2 (Phi(t) - t phi(t) + t**2 (1 - Phi(t))) for x >= 0, t = x / sigma."""
    t = torch.where(sigma > 0, x / torch.where(sigma > 0, sigma, 1.0), 0.0)
    cdf, pdf = torch.special.ndtr(t), torch.exp(-t * t / 2) / np.sqrt(2 * np.pi)
    below = (t * t + 1) * cdf + t * pdf
    above = cdf - t * pdf + t * t * (1 - cdf)
    inner = torch.where(x < 0, below, above).clamp_min(0.0)  # the formulas cancel far from the kink
    far = torch.where(x < 0, 0.0, 1.0)  # where they are exact: no error passed, or all of it
    return sigma * sigma * torch.where(t.abs() > KINK_SIGMAS, far, inner)


def _spread_of(value: Any) -> _Spread | None:
    return getattr(value, _SPREAD, None) if isinstance(value, torch.Tensor) else None


class _FirstOrder(_Rounding):  # type: ignore[no-untyped-call]  # torch leaves the mode unannotated
    """Every ATen op's float64 result, carrying E[error**2] of the roundings `_MonteCarlo` samples,
    propagated to first order: exact (up to the runs' own second-order terms) where each error
    reaches the output along one path of pointwise ops, permutations and at most one contraction
    or sum of independent errors. Anything else raises NotFirstOrder."""

    def __init__(self, storage: FloatFormat, products: FloatFormat | None = None):
        super().__init__(storage, products, None)
        self._count = 0

    def _new_source(self) -> frozenset[int]:
        self._count += 1
        return frozenset({self._count})

    def _uniform_second(
        self, t: torch.Tensor, half_width: float, fmt: FloatFormat, absolute: float = 0.0
    ) -> torch.Tensor:
        """E[d**2] of one rounding uniform in +-half_width ulp (or +-`absolute` where wider): its half-width**2 / 3."""
        self.roundings += t.numel()
        return torch.from_numpy(np.maximum(half_width * ulp(t.detach().numpy(), fmt), absolute) ** 2 / 3)

    def _give(
        self,
        out: torch.Tensor,
        second: torch.Tensor | None,
        independent: bool,
        sources: frozenset[int],
        centred: bool = True,
    ) -> Any:
        """`out` with its spread, the storage rounding added where `_MonteCarlo._stored` adds it."""
        if not (self.storage is self.compute or self._fused):
            stored = self._uniform_second(out, 0.5, self.storage)
            second = stored if second is None else second + stored
            sources = sources | self._new_source()
        if second is not None:
            setattr(out, _SPREAD, _Spread(second, independent, sources, centred))
        return out

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        leaves, spec = tree_flatten((args, kwargs))
        noisy = [i for i, leaf in enumerate(leaves) if _spread_of(leaf) is not None]
        if noisy and func._schema.is_mutable:
            raise NotFirstOrder(f"aten.{name} writes into a tensor with rounding errors")
        if func.is_view or name in MOVING_OPS or name in EXACT_OPS:
            out = func(*args, **kwargs)
            return self._moved(func, name, leaves, spec, noisy, out) if noisy and name not in VALUE_FREE else out
        fused = _fused_kernel(func, name)
        decomposition = _decomposition(func) if fused else None
        if decomposition is not None and _formula(name) and noisy:
            return self._formula_through(func, decomposition, leaves, spec, noisy)
        if decomposition is not None:
            result = self._decomposed(name, decomposition, args, kwargs)
            return _floats(result, lambda t: self._give(t, *self._held(t)))
        out = func(*args, **kwargs)
        if not (isinstance(out, torch.Tensor) and out.is_floating_point()):
            if noisy:
                raise NotFirstOrder(f"aten.{name} gives a value that depends on rounding errors")
            return out
        if name in SUMS or name in CONTRACTIONS:
            variance, scale = self._sum_variance(func, args, kwargs, out)
            local = torch.from_numpy(np.asarray(variance / scale**2, dtype=np.float64)).reshape(out.shape)
            second, independent, sources = self._summed_through(func, name, args, kwargs, leaves, noisy, out)
            total = local if second is None else second + local
            return self._give(out, total, independent, sources | self._new_source())
        if name in IEEE_OPS or torch.Tag.pointwise in func.tags:
            width = 0.5 if name in IEEE_OPS else LIBM_ULPS
        else:
            self.unmodelled.add(f"aten.{name}")
            width = 0.5
        second, independent, sources = self._pointwise_through(func, leaves, spec, noisy, out)
        width = kernels.step_ulps(name, width)
        local = self._uniform_second(out, width, self.compute, kernels.absolute_error(name))
        total = local if second is None else second + local
        centred = all(s.centred for i in noisy if (s := _spread_of(leaves[i])) is not None)
        return self._give(out, total, independent, sources | self._new_source(), centred)

    def _formula_through(
        self, func: Any, decomposition: Callable[..., Any], leaves: list[Any], spec: Any, noisy: list[int]
    ) -> torch.Tensor:
        """A formula kernel (FORMULA_OPS) on inputs with errors: its inputs' errors pass through the
        op's own slope, and its steps' roundings are those of its decomposition on the inputs as
        they are. Its decomposition run on the noisy input itself would see one error reach two of
        its steps (x and erf(x / sqrt 2)), which the first-order model cannot follow."""
        clean = [leaf.view(leaf.shape) if i in noisy else leaf for i, leaf in enumerate(leaves)]
        a, k = tree_unflatten(clean, spec)
        out = self._decomposed(func.overloadpacket.__name__, decomposition, a, k)
        local, _, own_sources, _ = self._held(out)
        second, independent, sources = self._pointwise_through(func, leaves, spec, noisy, out)
        total = second if local is None else local if second is None else second + local
        return self._give(out, total, independent, sources | own_sources)

    @staticmethod
    def _held(t: torch.Tensor) -> tuple[torch.Tensor | None, bool, frozenset[int], bool]:
        spread = _spread_of(t)
        if spread is None:
            return None, True, frozenset(), True
        return spread.second, spread.independent, spread.sources, spread.centred

    def _moved(self, func: Any, name: str, leaves: list[Any], spec: Any, noisy: list[int], out: Any) -> Any:
        """An exact op's output with its inputs' errors moved along: a permutation or selection
        moves each element's E[error**2] as it moves the element; neg, relu and abs scale it."""
        spreads = [_spread_of(leaves[i]) for i in noisy]
        sources = frozenset().union(*(s.sources for s in spreads if s is not None))
        if name in ("neg", "relu", "abs"):
            (spread,) = spreads
            assert spread is not None
            x, sigma = leaves[noisy[0]], torch.sqrt(spread.second)
            near = (x.abs() < KINK_SIGMAS * sigma) & (spread.second > 0)
            if name == "neg" or not bool(near.any()):
                second = torch.where(x > 0, spread.second, 0.0) if name == "relu" else spread.second
                setattr(out, _SPREAD, _Spread(second, spread.independent, spread.sources, spread.centred))
            elif name == "relu":  # within reach of the kink: relu's second moment under a Gaussian error
                setattr(out, _SPREAD, _Spread(_relu_second(x, sigma), False, spread.sources, False))
            else:
                raise NotFirstOrder(f"aten.{name} of values within reach of their rounding errors from 0")
            return out
        if name not in PERMUTING and name not in SELECTIONS:
            raise NotFirstOrder(f"aten.{name} selects by values with rounding errors")
        seconds = [
            (s.second if (s := _spread_of(leaf)) is not None else torch.zeros_like(leaf))
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
            else leaf
            for leaf in leaves
        ]
        moved_args, moved_kwargs = tree_unflatten(seconds, spec)
        if name == "constant_pad_nd":  # the padding is exact
            moved_args = (*moved_args[:2], 0.0)
        moved = func(*moved_args, **moved_kwargs)
        independent = name in PERMUTING and all(s is not None and s.independent for s in spreads)
        outs, _ = tree_flatten(out)
        for o, m in zip(outs, tree_flatten(moved)[0], strict=True):
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                setattr(o, _SPREAD, _Spread(m, independent, sources, all(s is not None and s.centred for s in spreads)))
        return out

    def _pointwise_through(
        self, func: Any, leaves: list[Any], spec: Any, noisy: list[int], out: torch.Tensor
    ) -> tuple[torch.Tensor | None, bool, frozenset[int]]:
        """E[error**2] a pointwise op passes on from its inputs: the first-order term per noisy
        input, its slope times its error; the slope is the central difference over +-its RMS error,
        exact for the affine ops and the first-order term for the others. Errors from different
        inputs add only where they are independent (no rounding in common)."""
        spreads = [s for i in noisy if (s := _spread_of(leaves[i])) is not None]
        if not spreads:
            return None, True, frozenset()
        sources: frozenset[int] = frozenset()
        for spread in spreads:
            if sources & spread.sources or (len(spreads) > 1 and not spread.centred):
                raise NotFirstOrder("one rounding error reaches a pointwise op twice")
            sources |= spread.sources
        second = torch.zeros_like(out)
        for i, spread in zip(noisy, spreads, strict=True):
            sigma = torch.sqrt(spread.second)

            def at(shift: torch.Tensor, i: int = i) -> torch.Tensor:
                moved = list(leaves)
                moved[i] = leaves[i] + shift
                a, k = tree_unflatten(moved, spec)
                return func(*a, **k)

            half = (at(sigma) - at(-sigma)) / 2
            second = second + torch.where(spread.second > 0, half * half, 0.0)
        independent = all(s.independent for s in spreads) and all(leaves[i].shape == out.shape for i in noisy)
        return second, independent, sources

    def _summed_through(
        self,
        func: Any,
        name: str,
        args: Any,
        kwargs: dict[str, Any],
        leaves: list[Any],
        noisy: list[int],
        out: torch.Tensor,
    ) -> tuple[torch.Tensor | None, bool, frozenset[int]]:
        """E[error**2] a sum or contraction passes on from its one noisy input, whose elements'
        errors are independent: the op run on E[error**2] and the other inputs squared (a mean's
        divided by its count once more); the bias is exact."""
        if not noisy:
            return None, True, frozenset()
        spread = _spread_of(leaves[noisy[0]])
        if len(noisy) > 1 or spread is None or not (spread.independent and spread.centred):
            raise NotFirstOrder(f"aten.{name} of correlated rounding errors")
        if name in SUMS:
            if args[0] is not leaves[noisy[0]]:
                raise NotFirstOrder(f"aten.{name} with errors outside its summands")
            second = func(spread.second, *args[1:], **kwargs)
            if name in AVERAGES:
                second = second / _count(func, args, out)
            return second, True, spread.sources
        if any(kwargs.get(k, 1) != 1 for k in ("alpha", "beta")):
            raise NotFirstOrder(f"aten.{name} with scaled terms")
        bias = ADDITIVE.get(name)
        if bias is not None and bias < len(args) and args[bias] is leaves[noisy[0]]:
            raise NotFirstOrder(f"aten.{name} with errors in its bias")
        moved = [
            (spread.second if i == noisy[0] else torch.square(v))
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else v
            for i, v in enumerate(leaves)
        ]
        moved_args, moved_kwargs = tree_unflatten(moved, _spec_of(args, kwargs))
        if bias is not None and bias < len(moved_args) and isinstance(moved_args[bias], torch.Tensor):
            moved_args = (
                *moved_args[:bias],
                None if name in ("convolution", "_convolution") else torch.zeros_like(moved_args[bias]),
                *moved_args[bias + 1 :],
            )
        return func(*moved_args, **moved_kwargs), False, spread.sources


def _count(func: Any, args: Any, out: torch.Tensor) -> float:
    """The terms each output of an average sums: a mean's, or an average pool's window (its
    divisor, where given). A float32 average pool sums its window in float32: DenseNet's pools on
    ONNX Runtime without graph optimizations, one rounding of a partial sum near 2 in an average
    that cancels to 3e-4, were flagged at 252x while the op was modelled as one rounding."""
    if func.overloadpacket.__name__ == "mean":
        return float(args[0].numel() // max(out.numel(), 1))
    divisor = args[6] if len(args) > 6 else None
    return float(divisor or np.prod(args[1]))


COHERENT = 4.0  # a loop's error beyond this many SDs of random roundings: they go one way


def _looped_sum_error(func: Any, args: Any, kwargs: dict[str, Any], compute: FloatFormat) -> np.ndarray | None:
    """A sum or mean over whole dimensions: the error of the plainest correct kernel, a loop adding
    its terms in storage order in the compute format (ONNX Runtime's optimized GlobalAveragePool,
    bit for bit). Its roundings are not random where the terms are alike: MaxViT-T's
    squeeze-excitation channels that GELU saturates at -0.1697 sum 3,136 near-equal terms, each
    addition rounding the same way, to 34x the random-order expectation (the layer 2.9x its
    typical threshold). A random order's error reaches 4 of its SDs once in 16,000 sums: the loop's
    own is allowed beyond that (COHERENT), not where it is one more draw of random roundings (which
    the threshold allows for). None for other ops, and formats numpy cannot add in."""
    if func.overloadpacket.__name__ not in ("sum", "mean") or not isinstance(args[0], torch.Tensor):
        return None
    if compute.np_dtype not in (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)):
        return None
    x = args[0]
    if x.dim() == 0:  # one term (`dim=0` of a scalar names no dimension to move)
        return None
    given = args[1] if len(args) > 1 else kwargs.get("dim")
    if given is None or (isinstance(given, (list, tuple)) and not given):
        dims = list(range(x.dim()))
    else:
        dims = sorted({d % x.dim() for d in ([given] if isinstance(given, int) else given)})
    keep = [d for d in range(x.dim()) if d not in dims]
    terms = np.asarray(x.detach().permute(*keep, *dims).reshape(*[x.shape[d] for d in keep], -1).numpy(), np.float64)
    if terms.shape[-1] < 2:
        return None
    stored = terms.astype(compute.np_dtype)  # the terms as the loop holds them: their own rounding is their op's
    looped = np.add.accumulate(stored, axis=-1, dtype=compute.np_dtype)[..., -1]
    return looped.astype(np.float64) - np.sum(stored.astype(np.float64), axis=-1)


def _spec_of(args: Any, kwargs: dict[str, Any]) -> Any:
    return tree_flatten((args, kwargs))[1]


def first_order_spread(
    fn: Callable[..., torch.Tensor],
    inputs64: dict[str, np.ndarray],
    storage: FloatFormat,
    products: FloatFormat | None = None,
) -> tuple[np.ndarray, set[str], set[str], int]:
    """The RMS error per element that `monte_carlo_runs` estimates, computed in one float64 run
    of `fn` (NotFirstOrder where it cannot be), with the same ops modelled as one rounding, the
    contractions that ran and the count of roundings."""
    mode = _FirstOrder(storage, products)
    with np.errstate(all="ignore"), mode:
        out = fn(**{k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in inputs64.items()})
    spread = _spread_of(out)
    shape = tuple(out.shape)
    second = np.zeros(shape) if spread is None else np.asarray(spread.second.detach().numpy(), dtype=np.float64)
    return np.sqrt(np.broadcast_to(second, shape)), mode.unmodelled, mode.contracted, mode.roundings


CONVERSIONS = {"lift_fresh", "alias", "detach", "_to_copy", "clone", "copy", "copy_", "contiguous"}


class _Computes(_EagerMode):
    """Records whether any ATen op beyond conversions and views runs."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: set[str] = set()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        tensors = any(isinstance(t, torch.Tensor) for t in tree_flatten((args, kwargs, out))[0])
        # an op that takes and gives no tensor (a finalizer's, run by the garbage collector) computes nothing
        if tensors and not (func.is_view or name in CONVERSIONS or name in MOVING_OPS):
            self.ops.add(name)
        return out


def torch_ops_computed(fn: Callable[..., Any], inputs: dict[str, np.ndarray]) -> set[str]:
    """The torch ops `fn` computes with when handed numpy arrays: none for a numpy function; for
    a torch function that converts its inputs first (`x, W, b = map(torch.as_tensor, ...)`), its
    ATen ops, so it is judged as the torch function it is, not by numpy's emulation."""
    mode = _Computes()
    with np.errstate(all="ignore"), mode:
        fn(**inputs)
    return mode.ops
