"""The floating-point formats opbench measures, described once for inputs, backends and metrics."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike

from accuracy.core.errors import OpbenchError


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE-style binary format: enough to compute ulps and Higham's unit roundoff."""

    name: str
    np_dtype: np.dtype
    precision: int  # significand bits, implicit bit included
    emin: int  # exponent of the smallest normal number
    emax: int  # exponent of the largest finite number

    @property
    def u(self) -> float:
        """Unit roundoff: the relative error bound of one correctly rounded operation."""
        return 2.0**-self.precision

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.precision + 1)

    @property
    def max_finite(self) -> float:
        return (2.0 - 2.0 ** (1 - self.precision)) * 2.0**self.emax

    def round(self, values: np.ndarray) -> np.ndarray:
        """Round float64 values to this format once (round-to-nearest-even)."""
        x = np.asarray(values, dtype=np.float64)
        if self.np_dtype in (np.float16, np.float32, np.float64):
            return x.astype(self.np_dtype)  # numpy rounds float64 to these directly
        # ml_dtypes casts float64 -> bfloat16 through float32, which rounds twice (1 + 2**-8 +
        # 2**-40 -> 1, not 1 + 2**-7). Rounding to odd in float32 first (24 >= 8 + 2 bits) makes
        # the second, nearest-even rounding give the correctly rounded result.
        with np.errstate(invalid="ignore", over="ignore"):
            f = x.astype(np.float32)
            back = f.astype(np.float64)
        fix = np.isfinite(x) & np.isfinite(f) & (back != x) & ((f.view(np.uint32) & 1) == 0)
        if np.any(fix):
            toward = np.where(back < x, np.float32(np.inf), np.float32(-np.inf))
            f = np.where(fix, np.nextafter(f, toward), f)
        return f.astype(self.np_dtype)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float16", np.dtype(np.float16), 11, -14, 15),
        FloatFormat("bfloat16", np.dtype(ml_dtypes.bfloat16), 8, -126, 127),
        FloatFormat("float32", np.dtype(np.float32), 24, -126, 127),
        FloatFormat("float64", np.dtype(np.float64), 53, -1022, 1023),
    )
}
ALL_DTYPES = tuple(FORMATS)
IEEE_DTYPES = ("float16", "float32", "float64")  # what plain numpy computes in
# what BLAS, LAPACK, scipy.special and torch.fft on the CPU offer: no half precision
SINGLE_DOUBLE = ("float32", "float64")


def get_format(name: str) -> FloatFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise OpbenchError(f"unknown dtype {name!r}; choose from {', '.join(FORMATS)}") from None


def format_of(array: np.ndarray) -> FloatFormat:
    """The format of a numpy array's dtype (bfloat16 included, through ml_dtypes)."""
    for fmt in FORMATS.values():
        if array.dtype == fmt.np_dtype:
            return fmt
    raise OpbenchError(f"unsupported array dtype {array.dtype}")


def ulp(values: ArrayLike, fmt: FloatFormat) -> np.ndarray:
    """The spacing of `fmt` at each value (subnormal spacing below the normal range).

    float64's own spacing scaled to fmt's precision, clipped to fmt's exponent range: one
    vectorised pass, fast enough for the per-partial-sum error models of the typical tier.
    """
    a = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.spacing(a) * 2.0 ** (53 - fmt.precision)
    spacing = np.clip(spacing, 2.0 ** (fmt.emin - fmt.precision + 1), 2.0 ** (fmt.emax - fmt.precision + 1))
    return np.where(np.isfinite(a), spacing, 2.0 ** (fmt.emin - fmt.precision + 1))
