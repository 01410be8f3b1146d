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
        if _NUMPY_ROUNDS_ONCE.get(self.np_dtype) == self.precision:
            return x.astype(self.np_dtype)
        # A format narrower than numpy's cast to its storage: bfloat16 (ml_dtypes casts float64
        # through float32, rounding twice: 1 + 2**-8 + 2**-40 -> 1, not 1 + 2**-7) and TF32
        # (stored in float32). Rounded in float64 to `precision` bits at its binade's spacing
        # (subnormal below emin), which the storage holds exactly; past max_finite it overflows.
        with np.errstate(invalid="ignore", over="ignore"):
            _, exponent = np.frexp(x)
            shift = self.precision - np.maximum(exponent, self.emin + 1)
            return np.ldexp(np.round(np.ldexp(x, shift)), -shift).astype(self.np_dtype)


# numpy's cast from float64 rounds once to these dtypes, at these precisions
_NUMPY_ROUNDS_ONCE = {np.dtype(np.float16): 11, np.dtype(np.float32): 24, np.dtype(np.float64): 53}


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


def is_floating(array: ArrayLike) -> bool:
    """Whether an array holds floats, bfloat16 included (ml_dtypes' bfloat16 is numpy kind 'V')."""
    dtype = np.asarray(array).dtype
    return dtype.kind == "f" or dtype == FORMATS["bfloat16"].np_dtype


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
    # the spacing of an inf or NaN is NaN, which fmax drops: the subnormal spacing there, as for
    # every value below the normal range (clip and where took twice as long: the emulations call
    # this once per rounded operation)
    smallest, largest = 2.0 ** (fmt.emin - fmt.precision + 1), 2.0 ** (fmt.emax - fmt.precision + 1)
    return np.asarray(np.fmin(np.fmax(spacing, smallest), largest))
