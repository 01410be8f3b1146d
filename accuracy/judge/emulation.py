"""Run an op's numpy formula as a plain working-precision algorithm would, on the same inputs.

The typical-error tier needs to know how far a *correct* algorithm at the compute precision
lands from the exact value on these very inputs. `emulate` evaluates the op's own float64
formula (`OpInfo.fp64`, or `OpInfo.working` where that leaves numpy's ufuncs) with every
operation rounded to the working format:

- mode "nearest": round-to-nearest after each operation, sums in plain recursive order (or
  pairwise): the least accurate textbook algorithm, deterministic;
- mode "random": Monte Carlo arithmetic (Parker 1997; Verificarlo, Denis et al. 2016): each
  operation adds an independent rounding error uniform in +-ulp/2 (libm functions +-2 ulp);
  a sum adds a Gaussian error with the variance recursive summation has, to first order,
  averaged over the orders of its terms. Repeated runs sample the error distribution of a
  correct recursive algorithm, the statistical model behind Higham & Mary's probabilistic bounds.

Values are carried in long double (64-bit significand on x86) so that float64 rounding errors
stay visible. A formula that leaves numpy's ufunc machinery (np.linalg, np.fft, np.einsum,
scipy's array-API functions) cannot be emulated: `emulate` then returns None, never a guess.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from accuracy.core.dtypes import FloatFormat, ulp
from accuracy.judge import kernels

CARRIER = np.longdouble
_INPUT = "input"  # memo entries holding the runs' shared inputs in CARRIER, by their id
_MISSING = object()  # no memo entry
_OWN_COPIES = "own copies"  # set in a memo whose formula writes into its inputs
Moments = tuple[np.ndarray, np.ndarray]  # a product and the standard deviation of its rounding errors
# functions a correctly rounded IEEE 754 operation computes; every other float ufunc is a libm call
_IEEE_UFUNCS = {np.add, np.subtract, np.multiply, np.divide, np.true_divide, np.sqrt, np.square, np.reciprocal}
# results that are exact in any format: no rounding error to add
_EXACT_UFUNCS = {
    np.negative,
    np.positive,
    np.absolute,
    np.fabs,
    np.maximum,
    np.minimum,
    np.fmax,
    np.fmin,
    np.sign,
    np.copysign,
    np.floor,
    np.ceil,
    np.trunc,
    np.rint,
}
# longer sums are emulated pairwise (vectorised): a Python loop per term would take seconds
RECURSIVE_LIMIT = 1 << 16
LIBM_ULPS = 2.0
# E[ulp(s)**2] / 12 / (u s)**2 for significands log-uniform on [1, 2): 4 * (3 / 8 / ln 2) / 12
ROUNDING_VARIANCE = (
    4 * (3 / 8 / np.log(2)) / 12
)  # half-width of a libm function's emulated error: vectorised libms promise 1-4 ulp
# functions that are compositions of ufuncs in numpy itself (safe to run on the emulated array)
_OPAQUE_MODULES = ("numpy.linalg", "numpy.fft")
# functions that only copy values, yet return a base ndarray: their result stays emulated
_COPYING_FUNCTIONS = {np.concatenate}
_OPAQUE_FUNCTIONS = {"einsum", "dot", "convolve", "correlate", "einsum_path", "vdot", "inner", "outer", "kron"}


def recursive_sum_variance(total: ArrayLike, squares: ArrayLike, n: ArrayLike, fmt: FloatFormat) -> np.ndarray:
    """Expected variance of the rounding errors of recursive summation in `fmt` over a *random*
    order of n terms with sum `total` and sum of squares `squares`: sum_k E[s_k**2] for
    sampling without replacement, times the mean squared rounding error per addition
    (ulp(s)**2/12 with log-uniformly distributed significands: ROUNDING_VARIANCE u**2 s**2).
    Averaging over orders keeps the scale valid for blocked and pairwise algorithms too."""
    s = np.asarray(total, dtype=np.float64)
    k = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    spread = np.maximum(np.asarray(squares, dtype=np.float64) / k - (s / k) ** 2, 0.0)
    partial_squares = s**2 * (k + 1) * (2 * k + 1) / (6 * k) + spread * k * (k + 1) / 6
    return ROUNDING_VARIANCE * fmt.u**2 * partial_squares + k * fmt.smallest_subnormal**2 / 12


@dataclass
class _Context:
    fmt: FloatFormat  # the compute format: inside a sum, a product, a libm call
    store: FloatFormat  # the format each operation's result is stored in (fmt, or narrower)
    mode: str  # "nearest" or "random"
    order: str  # "recursive" or "pairwise"
    rng: np.random.Generator | None
    memo: dict[Hashable, Any]  # per-operand results and the inputs shared by repeated random runs
    opaque: list[str] = field(default_factory=list)
    # a libm step's (half-width, absolute error) by function and the kernels' state it was read in
    # (kernels.here(), kept alive here so that its ids name it): read once per run, not per step
    steps: dict[tuple[str, int, int], tuple[float, float, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.narrower = self.store != self.fmt  # results stored in a format narrower than computed in

    @property
    def random(self) -> np.random.Generator:
        """The generator mode "random" draws its errors from (it always has one)."""
        assert self.rng is not None, 'emulation mode "random" needs an rng'
        return self.rng

    def noise(self, values: np.ndarray, half_width: float = 0.5, fmt: FloatFormat | None = None) -> np.ndarray:
        return self.random.uniform(-half_width, half_width, np.shape(values)) * ulp(values, fmt or self.fmt)

    def round(self, values: ArrayLike, ufunc: np.ufunc | None = None) -> np.ndarray:
        """One operation's rounding in the compute format."""
        array = np.asarray(values)
        if array.dtype.kind != "f":
            return array
        if self.mode == "nearest":
            return self.fmt.round(array.astype(np.float64)).astype(CARRIER)
        width, absolute = 0.5, 0.0
        if ufunc is not None:  # a kernel's approximation may widen a function's step (accuracy.judge.kernels)
            width, absolute = self._step(ufunc)
        if absolute:
            half = np.maximum(width * ulp(array, self.fmt), absolute)
            return array + (self.random.uniform(-1.0, 1.0, np.shape(array)) * half).astype(CARRIER)
        return array + self.noise(array, width).astype(CARRIER)

    def _step(self, ufunc: np.ufunc) -> tuple[float, float]:
        """`ufunc`'s step half-width in ulps and absolute error, as the kernels in force give them."""
        state = kernels.here()
        key = (ufunc.__name__, id(state[0]), id(state[1]))
        if key not in self.steps:
            width = kernels.step_ulps(ufunc.__name__, 0.5 if ufunc in _IEEE_UFUNCS else LIBM_ULPS)
            self.steps[key] = (width, kernels.absolute_error(ufunc.__name__), state)
        width, absolute, _ = self.steps[key]
        return width, absolute

    def to_storage(self, values: ArrayLike) -> np.ndarray:
        """An operation's result stored in the narrower format (float16 computed in float32)."""
        array = np.asarray(values)
        if not self.narrower or array.dtype.kind != "f":
            return array
        if self.mode == "nearest":
            return self.store.round(array.astype(np.float64)).astype(CARRIER)
        return array + self.noise(array, 0.5, self.store).astype(CARRIER)

    def _native(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """The arrays in float32 where the rounding mode is "nearest", the format float32 and every
        value a float32: numpy's own float32 sums and products are then the emulated ones, bit for
        bit, at a fraction of the cost. A sum or product of two float32s is exact in long double,
        or so far below an ulp that no rounding moves it; its rounding through float64 to float32
        is the correct one, as 53 >= 2 * 24 + 2 bits (Figueroa 1995). None elsewhere."""
        if self.mode != "nearest" or self.fmt.np_dtype != np.float32 or self.fmt.precision != 24:
            return None
        native = tuple(a.astype(np.float32) for a in arrays)
        if not all(np.array_equal(n, a) for n, a in zip(native, arrays, strict=True)):
            return None
        return native

    def _operand_key(self, a: np.ndarray) -> Hashable:
        """A memo key for an operand: where it is one of the runs' shared inputs or a view of one
        (a weight's transpose), where in which input; else its value (`_fingerprint`). Those
        inputs are read-only and kept alive by the memo, so the same place holds the same values,
        and naming it saves copying and hashing the operand in every run (issue 41)."""
        owner = a
        while isinstance(owner.base, np.ndarray):  # views of the Emulated views of an input
            owner = owner.base
        if self.memo.get((_INPUT, id(owner))) is not owner:
            return _Operand(a)
        return _INPUT, id(owner), a.ctypes.data - owner.ctypes.data, a.shape, a.strides

    def _memo(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        found = self.memo.get(key, _MISSING)  # one lookup: comparing operand keys compares their values
        if found is _MISSING:  # kept as copies: a formula may write into an operand after its use
            found = self.memo[tuple(part.kept() if isinstance(part, _Operand) else part for part in key)] = compute()
        return found

    def concatenate(self, arrays: Sequence[ArrayLike], axis: int | None) -> np.ndarray:
        """np.concatenate, one array shared by the random runs where its parts are the same in
        each (a bias joined to its weight): a matmul on it is then keyed by place, not by value."""
        parts = [np.asarray(_plain(a)) for a in arrays]
        if self.mode != "random" or self.memo.get(_OWN_COPIES):
            return np.concatenate(parts, axis=axis)

        def joined() -> np.ndarray:
            result = np.concatenate(parts, axis=axis)
            result.flags.writeable = False  # as the shared inputs: a run cannot change the next's
            self.memo[(_INPUT, id(result))] = result
            return result

        return self._memo(("concatenate", axis, *(self._operand_key(p) for p in parts)), joined)

    def sum(self, x: ArrayLike, axis: int = -1) -> np.ndarray:
        """Sum along `axis` in the emulated order, one rounding per addition."""
        x = np.moveaxis(np.asarray(x, dtype=CARRIER), axis, -1)
        if x.shape[-1] == 0:
            return np.zeros(x.shape[:-1], dtype=CARRIER)
        if self.mode == "random":  # first order: each partial sum s_k adds an error ~ ulp(s_k)
            total = np.sum(x, axis=-1)
            sigma = np.sqrt(recursive_sum_variance(total, np.sum(np.square(x), axis=-1), x.shape[-1], self.fmt))
            return total + (self.random.standard_normal(sigma.shape) * sigma).astype(CARRIER)
        if self.order == "pairwise" or x.shape[-1] > RECURSIVE_LIMIT:
            while x.shape[-1] > 1:
                head, tail = x[..., : x.shape[-1] // 2 * 2], x[..., x.shape[-1] // 2 * 2 :]
                x = np.concatenate([self.round(head[..., 0::2] + head[..., 1::2]), tail], axis=-1)
            return x[..., 0]
        if (native := self._native(x)) is not None:
            (x32,) = native
            s32 = x32[..., 0].copy()
            for k in range(1, x.shape[-1]):
                s32 = s32 + x32[..., k]
            return s32.astype(CARRIER)
        s = x[..., 0].copy()
        for k in range(1, x.shape[-1]):
            s = self.round(s + x[..., k])
        return s

    def cumsum(self, x: ArrayLike, axis: int = -1) -> np.ndarray:
        x = np.moveaxis(np.asarray(x, dtype=CARRIER), axis, -1)
        partial = np.cumsum(x, axis=-1)
        if self.mode == "random":
            errors = self.noise(partial).astype(CARRIER)
            errors[..., 0] = 0
            out = partial + np.cumsum(errors, axis=-1)
        else:
            out = np.empty_like(x)
            s = x[..., 0].copy()
            out[..., 0] = s
            for k in range(1, x.shape[-1]):
                s = self.round(s + x[..., k])
                out[..., k] = s
        return np.moveaxis(out, -1, axis)

    def einsum(self, subscripts: str, a: ArrayLike, b: ArrayLike) -> np.ndarray:
        """A two-operand contraction as sums of rounded products over the contracted indices."""
        a, b = np.asarray(a, dtype=CARRIER), np.asarray(b, dtype=CARRIER)
        inputs, output = subscripts.replace(" ", "").split("->")
        left, right = inputs.split(",")
        sizes = dict(zip(left, a.shape, strict=False)) | dict(zip(right, b.shape, strict=False))
        n = int(np.prod([sizes[i] for i in set(left + right) - set(output)], dtype=np.int64))
        if self.mode == "nearest":  # products rounded, then the rounded sum of n terms, recursive
            terms = self.round(
                np.einsum(f"{left},{right}->{output}{''.join(sorted(set(left + right) - set(output)))}", a, b)
            )
            return self.sum(terms.reshape(*terms.shape[: len(output)], -1))
        exact = (
            np.einsum(subscripts, a.astype(np.float64), b.astype(np.float64)).astype(CARRIER)
            if self.fmt.precision < 53
            else np.einsum(subscripts, a, b)
        )
        squares = np.einsum(subscripts, np.square(a.astype(np.float64)), np.square(b.astype(np.float64)))
        sigma = np.sqrt(
            recursive_sum_variance(exact, squares, n, self.fmt) + ROUNDING_VARIANCE * self.fmt.u**2 * squares
        )
        return exact + (self.random.standard_normal(sigma.shape) * sigma).astype(CARRIER)

    def _exact_matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The product accurately enough to carry `fmt`'s rounding errors: float64 BLAS is ample
        below float64 (and fast); float64 itself needs the long double loop."""
        if self.fmt.precision < 53:
            return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(CARRIER)
        return np.matmul(a, b)

    def _matmul_moments(self, a: np.ndarray, b: np.ndarray) -> Moments:
        """a @ b and the standard deviation of its rounding errors: the same in every random run
        on these operands, so the runs share them and only draw the errors."""
        exact = self._exact_matmul(a, b)
        squares = np.matmul(np.square(a.astype(np.float64)), np.square(b.astype(np.float64)))
        products = ROUNDING_VARIANCE * self.fmt.u**2 * squares  # each product rounded (no FMA)
        return exact, np.sqrt(recursive_sum_variance(exact, squares, a.shape[-1], self.fmt) + products)

    def matmul(self, a: ArrayLike, b: ArrayLike) -> np.ndarray:
        """a @ b as sums of rounded products (no FMA), batched like np.matmul."""
        a, b = np.asarray(a, dtype=CARRIER), np.asarray(b, dtype=CARRIER)
        vec_a, vec_b = a.ndim == 1, b.ndim == 1
        a = a[None, :] if vec_a else a
        b = b[:, None] if vec_b else b
        if self.mode == "random":
            key = ("matmul", self._operand_key(a), self._operand_key(b))
            exact, sigma = self._memo(key, lambda: self._matmul_moments(a, b))
            out = exact + self.random.standard_normal(sigma.shape) * sigma  # the error in float64, then carried
        elif (native := self._native(a, b)) is not None:
            a32, b32 = native
            out = a32[..., :, :1] * b32[..., :1, :]
            term = np.empty_like(out)
            for k in range(1, a.shape[-1]):
                np.add(out, np.multiply(a32[..., :, k : k + 1], b32[..., k : k + 1, :], out=term), out=out)
            out = out.astype(CARRIER)
        else:
            out = np.zeros((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]), dtype=CARRIER)
            for k in range(a.shape[-1]):
                term = self.round(a[..., :, k : k + 1] * b[..., k : k + 1, :])
                out = term if k == 0 else self.round(out + term)
        if vec_a and vec_b:
            return out[..., 0, 0]
        if vec_b:
            return out[..., 0]
        return out[..., 0, :] if vec_a else out


class _Operand:
    """A memo key for an operand that is none of the runs' shared inputs (their concatenation, a
    formula's intermediate): hashed by its shape and a sample of its values, equal where every
    value and sign is (a long double's padding bytes are arbitrary and never enter). Hashing all
    of a weight's bytes in each of 64 runs cost five times the runs' own arithmetic (issue 59)."""

    __slots__ = ("_hash", "array")
    SAMPLE = 64  # values hashed

    def __init__(self, array: np.ndarray):
        self.array = array
        step = max(1, array.size // self.SAMPLE)
        self._hash = hash((array.shape, array.flat[::step].astype(np.float64).tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Operand) or other._hash != self._hash or other.array.shape != self.array.shape:
            return False
        a, b = self.array, other.array
        return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)))

    def kept(self) -> _Operand:
        """This key over its own read-only copy of the values."""
        copy = np.array(self.array)
        copy.flags.writeable = False
        return _Operand(copy)


_CONTEXT: contextvars.ContextVar[_Context] = contextvars.ContextVar("emulation")


def _call_wide(ufunc: np.ufunc, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The ufunc in long double where it has such a loop, else in float64 (scipy.special)."""
    wide = [a.astype(CARRIER, copy=False) if (a := np.asarray(x)).dtype.kind == "f" else x for x in args]
    try:
        return ufunc(*wide, **kwargs)
    except TypeError:
        return ufunc(
            *[np.asarray(x, dtype=np.float64) if np.asarray(x).dtype.kind == "f" else x for x in args], **kwargs
        ).astype(CARRIER)


def _plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, Emulated) else value


def _wrap(value: ArrayLike) -> np.ndarray:
    array = np.asarray(value)
    return array.view(Emulated) if array.dtype.kind == "f" else array


class Emulated(np.ndarray):
    """An array whose arithmetic is rounded as the active emulation context says."""

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, out: Any = None, **kwargs: Any) -> Any:
        ctx = _CONTEXT.get()
        args = [_plain(x) for x in inputs]
        kwargs.pop("dtype", None)
        if method == "__call__":
            if ufunc is np.matmul:
                result = ctx.to_storage(ctx.matmul(*args))
            else:
                result = _call_wide(ufunc, args, kwargs)
                if ufunc not in _EXACT_UFUNCS:
                    result = ctx.to_storage(ctx.round(result, ufunc))
        elif method in ("reduce", "accumulate") and ufunc is np.add:
            axis = kwargs.get("axis", 0)
            x = np.asarray(args[0], dtype=CARRIER)
            if method == "accumulate":
                result = ctx.to_storage(ctx.cumsum(x, axis))
            else:
                axes = tuple(range(x.ndim)) if axis is None else np.atleast_1d(axis).tolist()
                axes = sorted(a % x.ndim for a in axes)
                flat = np.moveaxis(x, axes, range(-len(axes), 0)).reshape(*np.delete(x.shape, axes), -1)
                result = ctx.to_storage(ctx.sum(flat))
                if kwargs.get("keepdims"):
                    result = np.expand_dims(result, tuple(axes))
        elif method == "reduce" and ufunc in _EXACT_UFUNCS:
            result = ufunc.reduce(*args, **kwargs)
        else:
            ctx.opaque.append(f"{ufunc.__name__}.{method}")
            result = getattr(ufunc, method)(*args, **kwargs)
        target = out[0] if isinstance(out, tuple) else out
        if target is not None:
            _plain(target)[...] = result
            return target
        return _wrap(result) if not isinstance(result, tuple) else tuple(_wrap(r) for r in result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        ctx = _CONTEXT.get()
        if func is np.einsum and len(args) == 3 and isinstance(args[0], str) and not kwargs:
            return _wrap(ctx.to_storage(ctx.einsum(args[0], _plain(args[1]), _plain(args[2]))))
        if func is np.concatenate and len(args) + len(kwargs) <= 2 and set(kwargs) <= {"axis"}:
            return _wrap(ctx.concatenate(args[0], args[1] if len(args) == 2 else kwargs.get("axis", 0)))
        if func is np.dot and all(np.ndim(v) in (1, 2) for v in args[:2]) and len(args) == 2:
            return _wrap(ctx.to_storage(ctx.matmul(_plain(args[0]), _plain(args[1]))))
        module = getattr(func, "__module__", "") or ""
        if module.startswith(_OPAQUE_MODULES) or func.__name__ in _OPAQUE_FUNCTIONS:
            ctx.opaque.append(f"{module}.{func.__name__}")
        result = super().__array_function__(func, types, args, kwargs)
        return _wrap(result) if func in _COPYING_FUNCTIONS else result


def stored(values: np.ndarray) -> np.ndarray:
    """A formula's constants (an FFT's twiddle factors) as a working-precision algorithm holds
    them: rounded to the compute format inside an emulation (randomly in mode "random"),
    unchanged outside one."""
    ctx = _CONTEXT.get(None)
    return values if ctx is None else _wrap(ctx.round(np.asarray(values, dtype=CARRIER)))


def _shared_input(memo: dict[Hashable, Any], name: str, value: np.ndarray) -> np.ndarray:
    """The input `name` in CARRIER, converted once for all the runs sharing `memo` and read-only:
    a formula cannot change what the next run reads, and its operands keep their memo keys."""
    if (_INPUT, name) not in memo:
        carried = np.array(value, dtype=CARRIER)
        carried.flags.writeable = False
        memo[(_INPUT, name)] = carried
        memo[(_INPUT, id(carried))] = carried
    return memo[(_INPUT, name)]


def _evaluate(fn: Callable[..., Any], inputs64: dict[str, np.ndarray], ctx: _Context) -> Any:
    own = ctx.memo.get(_OWN_COPIES)
    token = _CONTEXT.set(ctx)
    try:
        with np.errstate(all="ignore"):
            return fn(
                **{
                    k: (np.array(v, dtype=CARRIER) if own else _shared_input(ctx.memo, k, v)).view(Emulated)
                    for k, v in inputs64.items()
                }
            )
    finally:
        _CONTEXT.reset(token)


def emulate(
    fn: Callable[..., Any],
    inputs64: dict[str, np.ndarray],
    fmt: FloatFormat,
    mode: str = "nearest",
    order: str = "recursive",
    rng: np.random.Generator | None = None,
    memo: dict[Hashable, Any] | None = None,
    store: FloatFormat | None = None,
) -> np.ndarray | None:
    """`fn(**inputs)` evaluated in emulated `fmt` arithmetic, each operation's result stored in
    `store` (default fmt); None where fn is not emulable. Random runs on the same inputs may
    share `memo` (products and their error scales, and the inputs in CARRIER)."""
    memo = {} if memo is None else memo
    draws = rng.bit_generator.state if rng is not None else {}
    ctx = _Context(fmt, store or fmt, mode, order, rng, memo)
    try:
        result = _evaluate(fn, inputs64, ctx)
    except (TypeError, ValueError):  # a formula using numpy in ways the emulation does not model
        if memo.get(_OWN_COPIES):
            return None
        # or one writing into its read-only inputs: it gets its own copies, in this and later runs
        memo[_OWN_COPIES] = True
        if rng is not None:
            rng.bit_generator.state = draws  # the same draws as on the first attempt
        ctx = _Context(fmt, store or fmt, mode, order, rng, memo)
        try:
            result = _evaluate(fn, inputs64, ctx)
        except (TypeError, ValueError):
            return None
    if ctx.opaque or not isinstance(result, Emulated):
        return None
    return result.view(np.ndarray)
