"""Each runtime limit is a declared finding with an error model that covers the real kernel, and
puts that kernel within its tier where the finding alone leaves it flagged."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

from accuracy.backends import get_backend
from accuracy.catalog.registry import get_op
from accuracy.catalog.runtime_limits import MLAS_SIGMOID, RUNTIME_LIMITS, limits_of
from accuracy.core.dtypes import FORMATS
from accuracy.judge import kernels
from accuracy.judge.error_metrics import rounding_error
from accuracy.judge.verdicts import WITHIN, Evidence

F32 = FORMATS["float32"]


@pytest.mark.parametrize("limit", RUNTIME_LIMITS, ids=lambda limit: f"{limit.runtime}:{limit.implementation}")
def test_every_runtime_limit_is_a_declared_finding(limit):
    impl = get_op(limit.op).impl(f"{limit.runtime}:{limit.implementation}", "float32")
    assert impl.finding, f"{limit.runtime}:{limit.implementation} declares no finding for {limit.op}"
    assert limit.words.startswith(impl.backend.split("-")[0].replace("onnxruntime", "ONNX Runtime"))
    assert limits_of(limit.runtime) and not limits_of("torch")


def _ort_sigmoid(x: np.ndarray) -> np.ndarray:
    impl = get_op("sigmoid").impl("onnxruntime:Sigmoid", "float32")
    backend = get_backend("onnxruntime")
    return backend.to_numpy(backend.call(impl.fn, {"x": backend.to_native(x)}), F32)


def test_the_mlas_sigmoid_model_covers_the_real_kernel():
    """Every 257th float32 bit pattern in (-100, 100), both signs: |error| <= the modelled bound."""
    pytest.importorskip("onnxruntime")
    bits = np.arange(0, 2**31, 257, dtype=np.int64).astype(np.uint32).view(np.float32)
    x = bits[np.isfinite(bits) & (np.abs(bits) < 100)]
    x = np.concatenate([x, -x])
    error = np.abs(_ort_sigmoid(x).astype(np.float64) - scipy.special.expit(x.astype(np.float64)))
    assert 1e-7 < error.max() <= MLAS_SIGMOID.approximation.absolute


def test_the_limit_puts_mlas_sigmoid_within_its_tier_where_the_finding_flags_it():
    pytest.importorskip("onnxruntime")
    op = get_op("sigmoid")
    x = np.random.default_rng(2060).uniform(-30.0, 30.0, 4096).astype(np.float32)
    output = _ort_sigmoid(x)
    evidence = Evidence(op, {"x": x}, F32)
    assert evidence.judge(output, op.impl("onnxruntime:Sigmoid", "float32")).verdict != WITHIN
    err = rounding_error(output, evidence.exact, F32)
    without = evidence.typical(F32)
    assert without is not None and without.ratio(err) > 1
    with kernels.using((MLAS_SIGMOID.approximation,)):
        limited = Evidence(op, {"x": x}, F32).typical(F32)
    assert limited is not None and limited.ratio(err) < 0.5
    # a sigmoid off by 1e-6 absolute is beyond what the limit explains
    assert limited.ratio(rounding_error((output + np.float32(1e-6)), evidence.exact, F32)) > 1
