"""The precision model: the format an implementation computes in, apart from the one it stores.

A float16 sum accumulated in float32 and rounded once is correct code, yet float16's own
gamma_n is vacuous beyond n = 2048. Each implementation therefore declares (Impl.compute) or
inherits from its backend the precision it computes in; its bound is the algorithm's bound at
that precision plus one final rounding to the stored format.

Backend policies, for implementations that declare nothing (a formula of several ops, each
rounding its result to storage, declares {"float16": "float16", ...}: it computes in storage):
- torch computes float16/bfloat16 in float32: its CPU kernels compute in `at::opmath_type`
  (float for Half and BFloat16); its CUDA reduced-precision-reduction mode accumulates in the
  stored format; its CUDA TF32 mode rounds float32 products' inputs to TF32;
- numpy computes in the input's precision (np.mean/np.var documentation: "computed using the
  same precision the input has"; einsum accumulates in its output), except its float16 ufunc
  loops, which call the float32 function and round once, and its linalg functions, which
  compute float32 in float64 (`numpy.linalg._commonType` upcasts single to double and casts
  the result back) — a formula around them (inv(a) @ b) does not.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from accuracy.core.dtypes import FORMATS, FloatFormat
from accuracy.reference.exact import Exact

TF32 = FloatFormat("tfloat32", np.dtype(np.float32), 11, -126, 127)
LOW_PRECISION = ("float16", "bfloat16")
NUMPY_LINALG_PREFIX = "np.linalg."  # a variant that is one numpy.linalg call, upcast whole
UFUNC_FAMILIES = ("elementwise", "activations")  # numpy's float16 loops call the float32 function
REDUCED_PRECISION_BACKENDS = ("torch-cuda-reduced-reduction",)
TF32_BACKENDS = ("torch-cuda-tf32",)


def format_named(name: str) -> FloatFormat:
    return TF32 if name == TF32.name else FORMATS[name]


def compute_format(impl: Any, fmt: FloatFormat, family: str = "") -> FloatFormat:
    """The format `impl` computes in when it stores `fmt` (declared, else its backend's policy;
    an unknown implementation computes in the stored format)."""
    backend = impl.backend if impl is not None else ""
    if backend in TF32_BACKENDS and fmt.name == "float32":
        return TF32  # the mode rounds every float32 product's inputs, whatever formula calls it
    declared = dict(getattr(impl, "compute", None) or {}) if impl is not None else {}
    if declared:
        return format_named(declared.get(fmt.name, fmt.name))
    if backend.startswith("torch") and fmt.name in LOW_PRECISION and backend not in REDUCED_PRECISION_BACKENDS:
        return FORMATS["float32"]
    if backend == "numpy":
        if fmt.name in LOW_PRECISION and family in UFUNC_FAMILIES:
            return FORMATS["float32"]
        if fmt.name == "float32" and impl.variant.startswith(NUMPY_LINALG_PREFIX):
            return FORMATS["float64"]
    return fmt


def scaled_unit_roundoff(fmt: FloatFormat, factor: float) -> FloatFormat:
    """A format whose unit roundoff is `factor` times fmt's: feeds a data-dependent constant
    (GEPP's growth factor) into a bound written as a function of u. Only u is meaningful."""
    fractional = fmt.precision - float(np.log2(max(factor, 1.0)))
    return replace(fmt, name=f"{fmt.name}*{factor:.3g}", precision=fractional)  # type: ignore[arg-type]  # only u counts


def model_bound(
    op: Any, inputs64: dict[str, np.ndarray], exact: Exact, storage: FloatFormat, compute: FloatFormat
) -> np.ndarray:
    """The op's worst-case bound at the compute precision, plus one rounding to storage."""
    with np.errstate(all="ignore"):
        bound = np.asarray(op.bound(inputs64, exact, compute), dtype=np.float64)
        if compute.precision > storage.precision:
            bound = bound + storage.u * np.abs(exact.hi) + storage.smallest_subnormal
    return np.broadcast_to(bound, exact.shape)
