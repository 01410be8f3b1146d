"""Each runtime limit has an error model that covers the real kernel, names a declared finding where
the registry's inputs reach it, and puts that kernel within its tier where it is flagged without
the model, while a kernel off by more stays flagged."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import scipy.special
import torch

from accuracy.backends import get_backend
from accuracy.catalog.registry import get_op
from accuracy.catalog.runtime_limits import (
    ATEN_SIGMOID_FLUSH,
    MLAS_SIGMOID,
    OPENVINO_SIGMOID,
    RUNTIME_LIMITS,
    RuntimeLimit,
    limits_of,
)
from accuracy.core.dtypes import FORMATS
from accuracy.judge import kernels
from accuracy.judge.error_metrics import rounding_error
from accuracy.judge.verdicts import WITHIN, Evidence

F32 = FORMATS["float32"]


def _every_97th(limit: float) -> np.ndarray:
    bits = np.arange(0, 2**31, 97, dtype=np.int64).astype(np.uint32).view(np.float32)
    x = bits[np.isfinite(bits) & (np.abs(bits) < limit)]
    return np.concatenate([x, -x])


def _ort(op: str) -> Callable[[np.ndarray], np.ndarray]:
    """ONNX Runtime's Sigmoid; its SiLU is x * Sigmoid(x), the product rounded to float32."""
    pytest.importorskip("onnxruntime")
    impl = get_op("sigmoid").impl("onnxruntime:Sigmoid", "float32")
    backend = get_backend("onnxruntime")

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return backend.to_numpy(backend.call(impl.fn, {"x": backend.to_native(x)}), F32)

    return sigmoid if op == "sigmoid" else lambda x: x * sigmoid(x)


def _torch(op: str) -> Callable[[np.ndarray], np.ndarray]:
    function = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu}[op]
    return lambda x: function(torch.from_numpy(x)).numpy()


def _openvino(op: str) -> Callable[[np.ndarray], np.ndarray]:
    ov = pytest.importorskip("openvino")
    function = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu}[op]

    class Op(torch.nn.Module):
        def forward(self, x):
            return function(x)

    def run(x: np.ndarray) -> np.ndarray:
        model = ov.convert_model(Op(), example_input=torch.from_numpy(x[:4]), input=[(x.size,)])
        compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return np.asarray(compiled(x)[0])

    return run


KERNELS = {MLAS_SIGMOID: _ort, ATEN_SIGMOID_FLUSH: _torch, OPENVINO_SIGMOID: _openvino}
EXACT = {"sigmoid": scipy.special.expit, "silu": lambda x: x * scipy.special.expit(x)}


def _name(limit: RuntimeLimit) -> str:
    return f"{limit.runtime}:{limit.op}"


def test_every_runtime_limit_has_its_kernel_here():
    assert set(KERNELS) == set(RUNTIME_LIMITS)
    assert limits_of("torch") == (ATEN_SIGMOID_FLUSH,) and not limits_of("unknown")


@pytest.mark.parametrize("limit", RUNTIME_LIMITS, ids=_name)
def test_a_runtime_limit_is_a_declared_finding_or_says_what_was_measured(limit):
    if limit.implementation:
        impl = get_op(limit.op).impl(f"{limit.runtime}:{limit.implementation}", "float32")
        assert impl.finding, f"{limit.runtime}:{limit.implementation} declares no finding for {limit.op}"
    else:
        assert limit.measured and get_op(limit.op)
    assert limit.words.endswith("not your port")


class _Swept(NamedTuple):
    """What every limit is held to on one op: its exact values, the libm bound, the spacing of
    float32 at them and the slope the sigmoid's absolute error is scaled by (23 million each)."""

    exact: np.ndarray
    libm: np.ndarray
    spacing: np.ndarray
    slope: np.ndarray | float


@pytest.fixture(scope="module")
def swept() -> tuple[np.ndarray, dict[str, _Swept]]:
    """The 23 million inputs of the sweep, and each op's `_Swept` as first asked for: the same for
    every limit (the exact values took a second to compute, the rest a third of a second)."""
    return _every_97th(120.0), {}


def _swept_op(x: np.ndarray, op: str) -> _Swept:
    x64 = x.astype(np.float64)
    exact = EXACT[op](x64)
    libm = 4 * F32.u * np.abs(exact) + F32.smallest_subnormal
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return _Swept(exact, libm, spacing, np.abs(x64) if op == "silu" else 1.0)


@pytest.mark.xdist_group("runtime-limits-sweep")  # one worker computes the module's sweep
@pytest.mark.parametrize("op", ["sigmoid", "silu"])
@pytest.mark.parametrize("limit", RUNTIME_LIMITS, ids=_name)
def test_the_error_model_covers_the_real_kernel(limit, op, swept):
    """Every 97th float32 bit pattern in (-120, 120), both signs: |error| <= the modelled bound,
    the registry's libm bound 4u|f(x)| widened to the sigmoid step's absolute error (times |x| in
    x * sigmoid(x)) and its ulps (plus the product's own rounding); and beyond the libm bound alone."""
    x, ops = swept
    if op not in ops:
        ops[op] = _swept_op(x, op)
    exact, libm, spacing, slope = ops[op]
    error = np.abs(KERNELS[limit](op)(x).astype(np.float64) - exact)
    approximation = limit.approximation
    ulps = approximation.ulps + (0.5 if op == "silu" else 0.0)
    bound = np.maximum(np.maximum(libm, approximation.absolute * slope), ulps * spacing)
    assert (error <= bound).all(), f"{x[np.argmax(error / bound)]}: {(error / bound).max():.3g}x the model"
    assert (error > libm).any()  # the limit is real: the libm bound alone does not hold the kernel


@pytest.mark.parametrize("op", ["sigmoid", "silu"])
@pytest.mark.parametrize("limit", RUNTIME_LIMITS, ids=_name)
def test_the_limit_puts_the_kernel_within_its_tier_where_it_is_flagged(limit, op):
    """On inputs that reach the limit (N(0, 40²): a tail below -88), the kernel is not within
    rounding and beyond its typical threshold; with the limit modelled it is within it, and the
    same output off by 1e-6 is not."""
    registry = get_op(op)
    x = np.random.default_rng(2060).normal(0.0, 40.0, 4096).astype(np.float32)
    output = KERNELS[limit](op)(x)
    evidence = Evidence(registry, {"x": x}, F32)
    assert evidence.judge(output, None).verdict != WITHIN
    err = rounding_error(output, evidence.exact, F32)
    without = evidence.typical(F32)
    assert without is not None and without.ratio(err) > 1
    with kernels.using((limit.approximation,)):
        limited = Evidence(registry, {"x": x}, F32).typical(F32)
    assert limited is not None and limited.ratio(err) < 0.5
    off = output + np.where(np.abs(output) > 0.1, np.float32(1e-6), np.float32(0))
    assert limited.ratio(rounding_error(off, evidence.exact, F32)) > 1
