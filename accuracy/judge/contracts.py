"""Elementwise contracts: the accuracy a library promises for a function, in ulps.

An ulp contract is stated against the correctly rounded result: "max_ulp 3" allows a result at
most 3 representable numbers away from the exact value rounded to the result's format. Sources:

- numpy publishes a maximum ULP error per function and dtype in its validation data,
  numpy/_core/tests/data/umath-validation-set-<func>.csv (column `ulperror`, checked by
  numpy/_core/tests/test_umath_accuracy.py; numpy commit 1f90bbb5);
- IEEE 754 requires squareRoot to be correctly rounded (0 ulp) in every format;
- a format computed in a wider one whose own contract is far below half an ulp of the stored
  format (numpy's and torch's float16/bfloat16 loops in float32) rounds to one of the two
  neighbours of the exact value: 1 ulp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat, ulp
from accuracy.judge.precision import compute_format

_NUMPY_TABLE = "numpy umath-validation-set-{}.csv"
# function -> {dtype: max ulp}, transcribed from the `ulperror` column of numpy's files
NUMPY_MAX_ULP = {
    "exp": {"float32": 3, "float64": 1},
    "log": {"float32": 4, "float64": 1},
    "tanh": {"float32": 2, "float64": 2},
    "sin": {"float32": 2, "float64": 1},
    "cos": {"float32": 2, "float64": 1},
    "expm1": {"float32": 3, "float64": 1},
    "log1p": {"float32": 2, "float64": 1},
}
# the functions IEEE 754 requires to be correctly rounded, by the variant names that call them
CORRECTLY_ROUNDED = {"sqrt": ("np.sqrt", "torch.sqrt")}


@dataclass(frozen=True)
class Contract:
    max_ulp: int  # distance from the correctly rounded value, in representable numbers
    source: str


def contract_for(op_name: str, impl: Any, storage: FloatFormat, compute: FloatFormat) -> Contract | None:
    """The contract `impl` states for `op_name` at `storage`, or None where none is published."""
    if impl is None:
        return None
    if impl.variant in CORRECTLY_ROUNDED.get(op_name, ()):
        return Contract(0, "IEEE 754 correctly rounded squareRoot")
    if impl.backend == "numpy" and impl.variant == f"np.{op_name}" and op_name in NUMPY_MAX_ULP:
        table = NUMPY_MAX_ULP[op_name]
        if storage.name in table:
            return Contract(table[storage.name], _NUMPY_TABLE.format(op_name))
        if compute.name in table and table[compute.name] * 2.0 ** (storage.precision - compute.precision) < 0.5:
            return Contract(1, f"computed in {compute.name} ({_NUMPY_TABLE.format(op_name)}), rounded once")
    return None


def ulps_from_correctly_rounded(result: np.ndarray, rounded: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """How many representable numbers of `fmt` lie between result and the correctly rounded value."""
    r = np.asarray(result, dtype=np.float64)
    c = np.asarray(rounded, dtype=np.float64)
    same = (r == c) | (np.isnan(r) & np.isnan(c))
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.minimum(ulp(r, fmt), ulp(c, fmt))
        steps = np.abs(r - c) / spacing
    return np.where(same, 0.0, np.where(np.isfinite(steps), np.round(steps), np.inf))


def generic_contract(op: Any, fmt: FloatFormat) -> Contract | None:
    """The loosest ulp contract any of the registry op `op`'s implementations publishes for `fmt`:
    what an output of unknown origin may claim (None where no library publishes one)."""
    published = [
        c
        for impl in op.impls
        if fmt.name in impl.dtypes
        if (c := contract_for(op.name, impl, fmt, compute_format(impl, fmt, op.family)))
    ]
    if not published:
        return None
    loosest = max(published, key=lambda c: c.max_ulp)
    return replace(loosest, source=f"generic contract for any {op.name}: {loosest.source}")
