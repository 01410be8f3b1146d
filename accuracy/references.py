"""Reference strategies shared by op declarations: correctly rounded elementwise values."""

from __future__ import annotations

import numpy as np

from accuracy.dtypes import FloatFormat
from accuracy.exact import Exact, mp_map
from accuracy.metrics import ulp

# A float64 libm result is within a few float64 ulps; near a rounding boundary of the target
# that is not enough to know which way the correct rounding goes, so mpmath decides there.
_BOUNDARY_MARGIN_FP64_ULPS = 64


def correctly_rounded(np_fn, mp_fn, x: np.ndarray, fmt: FloatFormat) -> Exact:
    """The exact value of an elementwise function, good enough to round correctly to `fmt`.

    float64 targets use mpmath outright. Narrower targets use the float64 value, except where
    it lies within a few float64 ulps of a midpoint between two `fmt` numbers: there mpmath.
    """
    x = np.asarray(x, dtype=np.float64)
    if fmt.precision >= 53:
        return mp_map(mp_fn, x)
    with np.errstate(all="ignore"):
        v = np.asarray(np_fn(x), dtype=np.float64)
        nearest = fmt.round(v).astype(np.float64)
        distance = np.abs(v - nearest) / ulp(v, fmt)  # in target ulps, 0 .. 0.5
    margin = _BOUNDARY_MARGIN_FP64_ULPS * 2.0 ** (fmt.precision - 53)
    risky = ~np.isfinite(distance) | (0.5 - distance <= margin)
    hi, lo = v.copy(), np.zeros_like(v)
    if risky.any():
        fixed = mp_map(mp_fn, x[risky])
        hi[risky], lo[risky] = fixed.hi, fixed.lo
    return Exact(hi, lo)
