"""Building blocks for the ops' `oracle`s: small-size mpmath evaluations that check each `exact`.

An op's `exact` is the reference every measurement trusts, so its oracle reaches the same value
by another route (an unshifted formula where exact shifts, plain 200-bit sums where exact uses
Dot2, a QR solve where exact uses LU, ...). An oracle takes the float64 inputs dict and returns
the result as a flat sequence of mpmath numbers in the output's row-major order; the caller sets
the working precision (`mpmath.workprec(200)`), which these helpers leave alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mpmath
import numpy as np

# An oracle: the float64 inputs -> the exact result as a flat row-major sequence of mpf.
Oracle = Callable[[Mapping[str, np.ndarray]], Sequence[Any]]


def mp(v: Any) -> mpmath.mpf:
    """A float64 as an mpf (exact: every float64 is an mpf at any precision >= 53)."""
    return mpmath.mpf(float(v))


def mp_list(a: Any) -> list[Any]:
    return [mp(v) for v in np.ravel(a)]


def elementwise(fn: Callable[..., Any], *keys: str) -> Oracle:
    """Oracle of an elementwise op: fn(mpf, ...) on the inputs `keys` (default "x") element by element."""
    keys = keys or ("x",)
    return lambda inputs: [fn(*args) for args in zip(*(mp_list(inputs[k]) for k in keys), strict=False)]


def rowwise(fn: Callable[..., Sequence[Any]], *keys: str) -> Oracle:
    """Oracle of a row-wise op: fn(row of mpf, ...) -> list of mpf over the last axis of `keys` (default "x";
    the others broadcast to the first's shape, e.g. layer_norm's w and b)."""
    keys = keys or ("x",)

    def oracle(inputs: Mapping[str, np.ndarray]) -> list[Any]:
        shape = np.shape(inputs[keys[0]])
        rows = [np.broadcast_to(inputs[k], shape).reshape(-1, shape[-1]) for k in keys]
        return [v for parts in zip(*rows, strict=False) for v in fn(*(mp_list(p) for p in parts))]

    return oracle


def mp_dot(xs: Any, ys: Any) -> mpmath.mpf:
    """sum x*y in mpmath: each product of two float64 is exact at 200 bits, the sum nearly so."""
    return mpmath.fsum(mp(x) * mp(y) for x, y in zip(np.ravel(xs), np.ravel(ys), strict=False))


def mp_matmul(a: Any, b: Any) -> list[Any]:
    """A @ B (batched over leading axes, as np.matmul) as a flat row-major list of mpf."""
    a, b = np.broadcast_arrays(np.asarray(a)[..., :, :, None], np.asarray(b)[..., None, :, :])
    # a[..., i, k, j] = A[..., i, k], b[..., i, k, j] = B[..., k, j]: sum over k
    a, b = np.moveaxis(a, -2, -1), np.moveaxis(b, -2, -1)
    return [mp_dot(x, y) for x, y in zip(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), strict=False)]


def one_pass_var(row: Sequence[Any], ddof: int = 0) -> mpmath.mpf:
    """(sum x^2 - (sum x)^2/n) / (n - ddof): the textbook one-pass form, harmless at 200 bits, and
    another formula from the two-pass one the references use."""
    n = len(row)
    s1, s2 = mpmath.fsum(row), mpmath.fsum(v * v for v in row)
    return (s2 - s1 * s1 / n) / (n - ddof)


def mp_matrix(a: Any) -> mpmath.matrix:
    return mpmath.matrix(np.asarray(a, dtype=np.float64).tolist())
