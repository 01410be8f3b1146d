"""Monte Carlo arithmetic for a torch function: the typical tier of `opbench check --fn`.

A registry op's typical tier re-runs its numpy formula with rounded arithmetic
(accuracy.judge.emulation). A user's torch function cannot be run by numpy, but torch shows every ATen
operation it calls (a TorchDispatchMode). Each one is evaluated in float64 and given the
rounding error a working-precision kernel makes, sampled as emulate's mode "random" does:

- pointwise ops (tagged `torch.Tag.pointwise`): one rounding, uniform in +-ulp/2 for IEEE
  operations and +-LIBM_ULPS ulp for libm functions; sign changes and copies are exact;
- sums and contractions (sum, mean, mm, addmm, bmm, baddbmm, mv, addmv, dot, convolution): a
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
from typing import Any

import numpy as np
import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from accuracy.core.dtypes import FORMATS, FloatFormat, ulp
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
SUMS = {"sum", "mean"}
CONTRACTIONS = {"mm", "addmm", "bmm", "baddbmm", "mv", "addmv", "dot", "vdot", "convolution", "_convolution"}
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
    return tree_map(lambda t: fn(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, value)


class _EagerMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    """A mode that only ever watches eager calls. torch wraps a mode's `__torch_dispatch__` so that
    torch.compile skips it, and that wrapper imports torch._dynamo on the first op dispatched:
    1.5 s of every `opbench model` and `check --fn` that has no use for the compiler. The opt-out
    is the one torch's TorchDispatchMode documents for mode authors (`_should_skip_dynamo`)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class _MonteCarlo(_EagerMode):
    """Every ATen op's float64 result plus a sampled working-precision rounding error."""

    def __init__(self, storage: FloatFormat, rng: np.random.Generator, products: FloatFormat | None = None):
        super().__init__()  # type: ignore[no-untyped-call]
        self.storage = storage
        self.compute = FORMATS["float32"] if storage.name in LOW_PRECISION else storage
        self.products = products  # the format a contraction rounds its products' inputs to (TF32), if any
        self.rng = rng
        self.unmodelled: set[str] = set()
        self.contracted: set[str] = set()  # the contractions that ran, for the verdict's reason
        self._fused = 0  # depth inside a decomposed fused kernel, whose intermediates are not stored
        # every rounding sampled, over all elements: an upper bound on those any one output element
        # depends on, for the typical tier's worst case (accuracy.judge.verdicts, docs/verdicts.md)
        self.roundings = 0

    def _uniform(self, t: torch.Tensor, half_width: float, fmt: FloatFormat) -> torch.Tensor:
        values = t.detach().numpy()
        self.roundings += values.size
        noise = self.rng.uniform(-half_width, half_width, values.shape) * ulp(values, fmt)
        return t + torch.from_numpy(noise).to(t.dtype)

    def _stored(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.storage is self.compute or self._fused else self._uniform(t, 0.5, self.storage)

    def _summed(self, func: Any, args: Any, kwargs: dict[str, Any], out: torch.Tensor) -> torch.Tensor:
        """A sum or contraction's result with a Gaussian error of recursive summation's variance."""
        squares = func(*_floats(args, torch.square), **kwargs)
        terms = func(*_floats(args, torch.ones_like), **kwargs)
        total, scale = out, 1.0
        if func.overloadpacket.__name__ == "mean":  # a sum divided by its count of terms
            scale = float(args[0].numel() // max(out.numel(), 1))
            total, squares, terms = out * scale, squares * scale, terms * scale
        total64, squares64, terms64 = (
            np.asarray(v.detach().numpy(), dtype=np.float64) for v in (total, squares, terms)
        )
        variance = recursive_sum_variance(total64, squares64, terms64, self.compute)
        self.roundings += int(np.sum(terms64))  # one per addition
        if func.overloadpacket.__name__ in CONTRACTIONS:
            self.roundings += int(np.sum(terms64)) * (3 if self.products is not None else 1)  # and per product
            variance = variance + ROUNDING_VARIANCE * self.compute.u**2 * squares64  # each product rounded
            self.contracted.add(f"aten.{func.overloadpacket.__name__}")
            if self.products is not None:  # and each of its two inputs rounded before
                variance = variance + 2 * ROUNDING_VARIANCE * self.products.u**2 * squares64
        noise = self.rng.standard_normal(np.shape(total64)) * np.sqrt(variance) / scale
        return out + torch.from_numpy(np.asarray(noise)).to(out.dtype)

    def _decomposed(self, decomposition: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
        """A fused kernel run as its decomposition, back through this mode."""
        self._fused += 1
        try:
            with self:
                return decomposition(*args, **kwargs)
        finally:
            self._fused -= 1

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if func.is_view or name in MOVING_OPS or name in EXACT_OPS:
            return func(*args, **kwargs)
        fused = not (name in SUMS or name in CONTRACTIONS or name in IEEE_OPS or torch.Tag.pointwise in func.tags)
        decomposition = _decomposition(func) if fused else None
        if decomposition is not None:
            return _floats(self._decomposed(decomposition, args, kwargs), self._stored)
        out = func(*args, **kwargs)
        if not (isinstance(out, torch.Tensor) and out.is_floating_point()) and name in SUMS:
            return out
        if name in SUMS or name in CONTRACTIONS:
            return self._stored(self._summed(func, args, kwargs, out))
        if name in IEEE_OPS or torch.Tag.pointwise in func.tags:  # torch's decompositions call prims.div, untagged
            width = 0.5 if name in IEEE_OPS else LIBM_ULPS
        else:
            self.unmodelled.add(f"aten.{name}")
            width = 0.5
        return _floats(out, lambda t: self._stored(self._uniform(t, width, self.compute)))


def _decomposition(func: Any) -> Callable[..., Any] | None:
    """torch's decomposition of a fused kernel (torch._decomp), or None; prims.var, where torch's
    decompositions of var, var_mean and std end, has none of its own and runs as its two passes."""
    return _two_pass_variance if func is torch.ops.prims.var.default else decomposition_table.get(func)


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
    runs: list[np.ndarray] = []
    unmodelled: set[str] = set()
    contracted: set[str] = set()
    roundings = 0
    for seed in seeds:
        mode = _MonteCarlo(storage, np.random.default_rng(seed), products)
        with np.errstate(all="ignore"), mode:
            out = fn(**{k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in inputs64.items()})
        runs.append(np.asarray(out.detach().numpy(), dtype=np.float64))
        unmodelled |= mode.unmodelled
        contracted |= mode.contracted
        roundings = max(roundings, mode.roundings)
    return runs, unmodelled, contracted, roundings


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
        if not (func.is_view or name in CONVERSIONS or name in MOVING_OPS):
            self.ops.add(name)
        return func(*args, **(kwargs or {}))


def torch_ops_computed(fn: Callable[..., Any], inputs: dict[str, np.ndarray]) -> set[str]:
    """The torch ops `fn` computes with when handed numpy arrays: none for a numpy function; for
    a torch function that converts its inputs first (`x, W, b = map(torch.as_tensor, ...)`), its
    ATen ops, so it is judged as the torch function it is, not by numpy's emulation."""
    mode = _Computes()
    with np.errstate(all="ignore"), mode:
        fn(**inputs)
    return mode.ops
