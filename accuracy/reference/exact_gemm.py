"""Exact float64 matrix products at BLAS speed: Ozaki's error-free splitting.

A's rows and B's columns are scaled by powers of two (exact) so each row/column's largest entry
is below 1, then cut into slices: slice s holds integers of at most `bits` bits times 2**(-s*bits).
With 2*bits + log2(k) <= 53, every product of one A slice with one B slice is an exact float64
GEMM whatever order the BLAS sums in (every partial sum is an integer multiple of the same power
of two below 2**53). The exact products are then summed by K-fold compensated summation
(Ogita-Rump-Oishi SumK, K = 3) into a double-double. The one inexact step is the float64 tail
of the smallest products (see `_products`): the result is within 2**-104 |AB| + 2**-100 max|a_i| max|b_j|
of the exact product, against Dot2's (k u)**2 |A||B| (2**-88 |A||B| at k = 512).

Slicing stops when every remainder is zero, so nothing of A or B is dropped. Entries far below
their row's largest (say 2**-60 of it) need more slices; random data needs 3-4 per side.

Memory: the slices of A and B and, for a block of r rows of A, the slices_a*slices_b exact
products: 8*(slices_a*m*k + slices_b*k*n + r*n*(slices_a*slices_b + 3)) bytes. r is chosen so
that this stays within `MEMORY_BUDGET_BYTES`; if even one row does not fit, ValueError.
"""

from __future__ import annotations

import math

import numpy as np

from accuracy.reference.exact import Exact, two_sum

MEMORY_BUDGET_BYTES = 1 << 30  # 1 GiB of working arrays at most


def slice_bits(k: int) -> int:
    """Bits per slice so that a k-term dot product of two slices is exact in float64."""
    return (53 - max(1, math.ceil(math.log2(max(k, 2))))) // 2


def _row_scale(a: np.ndarray, axis: int) -> np.ndarray:
    """Powers of two 2**e with every |entry| < 2**e along `axis` (1 where all are zero)."""
    top = np.max(np.abs(a), axis=axis, keepdims=True)
    _, e = np.frexp(top)  # top = m 2**e, 0.5 <= m < 1: top < 2**e
    return np.ldexp(1.0, np.where(top > 0, e, 0))


def split(a: np.ndarray, axis: int, bits: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Slices whose sum is a / scale exactly, and the scale (powers of two along `axis`)."""
    scale = _row_scale(a, axis)
    rest = a / scale  # exact: a power-of-two scaling (no entry underflows for sane data)
    slices = []
    for s in range(1, 1000 // bits + 1):  # 2**(s*bits) stays finite
        step = 2.0 ** (s * bits)
        piece = np.rint(rest * step) / step  # exact: rounding to a coarser grid, then rescaling
        slices.append(piece)
        rest = rest - piece  # exact: the rounding error of rint
        if not rest.any():
            return slices, scale
    raise ValueError("matrix entries span more than the float64 exponent range within one row")


def _sum_k(terms: list[np.ndarray]) -> Exact:
    """Sum of float64 arrays as a double-double, as if computed in triple precision (SumK, K=3)."""
    for _ in range(2):  # two error-free cascades, then a plain sum of what is left
        for i in range(1, len(terms)):
            terms[i], terms[i - 1] = two_sum(terms[i], terms[i - 1])
    hi = terms[-1]
    lo = np.sum(terms[:-1], axis=0) if len(terms) > 1 else np.zeros_like(hi)
    s, e = two_sum(hi, lo)
    return Exact(s, e)


def _supports(slices: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each slice's nonzero (rows, columns)."""
    return [(np.flatnonzero(x.any(axis=1)), np.flatnonzero(x.any(axis=0))) for x in slices]


def _products(a_slices: list[np.ndarray], b_slices: list[np.ndarray]) -> list[np.ndarray]:
    """The exact slice products to sum, each restricted to its slices' nonzero rows/columns.

    The last slices of random data hold only the few entries far below their row's largest, so
    most of their products cost almost nothing. Products of slices i + j >= 3 (0-based) are below
    k 2**(-3*bits) of the row/column scales: those are gathered into one float64 tail, which errs
    by < 2**-100 max|a_i| max|b_j| and keeps the cascades short.
    """
    m, n = a_slices[0].shape[0], b_slices[0].shape[1]
    a_sup, b_sup = _supports(a_slices), _supports(b_slices)
    terms, tail = [], np.zeros((m, n))
    # smallest products first: the cascades then carry the big terms' rounding errors down
    pairs = sorted(((i, j) for i in range(len(a_slices)) for j in range(len(b_slices))), key=lambda p: -sum(p))
    for i, j in pairs:
        (rows, a_cols), (b_rows, cols) = a_sup[i], b_sup[j]
        inner = np.intersect1d(a_cols, b_rows, assume_unique=True)
        small = i + j >= 3
        if 4 * len(rows) * len(inner) * len(cols) > m * a_slices[i].shape[1] * n:
            product = a_slices[i] @ b_slices[j]
            if small:
                tail += product
            else:
                terms.append(product)
            continue
        target = tail if small else np.zeros((m, n))
        target[np.ix_(rows, cols)] += a_slices[i][np.ix_(rows, inner)] @ b_slices[j][np.ix_(inner, cols)]
        if not small:
            terms.append(target)
    return [tail, *terms]


def _block_rows(m: int, k: int, n: int, sa: int, sb: int) -> int:
    free = MEMORY_BUDGET_BYTES - 8 * (sa * m * k + sb * k * n)
    rows = free // (8 * n * (sa * sb + 3))
    if rows < 1:
        raise ValueError(f"exact product of {m}x{k} by {k}x{n} needs more than {MEMORY_BUDGET_BYTES} bytes")
    return max(1, min(m, rows))  # no rows (m = 0): one empty block, not a step of 0


def ozaki_matmul(a: np.ndarray, b: np.ndarray) -> Exact:
    """A @ B (2-D float64) exactly, rounded once to a double-double."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    (m, k), n = a.shape, b.shape[1]
    bits = slice_bits(k)
    a_slices, a_scale = split(a, 1, bits)
    b_slices, b_scale = split(b, 0, bits)
    rows = _block_rows(m, k, n, len(a_slices), len(b_slices))
    hi, lo = np.empty((m, n)), np.empty((m, n))
    for r in range(0, m, rows):
        block = _sum_k(_products([x[r : r + rows] for x in a_slices], b_slices))  # each product exact
        scale = a_scale[r : r + rows] * b_scale  # outer product of powers of two: exact
        hi[r : r + rows], lo[r : r + rows] = block.hi * scale, block.lo * scale
    return Exact(hi, lo)


def exact_matmul(a: np.ndarray, b: np.ndarray) -> Exact:
    """A @ B over the last two axes (leading axes batch, numpy broadcasting), as a double-double."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim == 2 and b.ndim == 2:
        return ozaki_matmul(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, *b.shape[-2:])
    parts = [ozaki_matmul(x, y) for x, y in zip(a, b, strict=False)]
    shape = (*batch, a.shape[-2], b.shape[-1])
    return Exact(np.stack([p.hi for p in parts]).reshape(shape), np.stack([p.lo for p in parts]).reshape(shape))
