"""A quantize point's noise: ONNX Runtime's own QuantizeLinear -> DequantizeLinear leaves an rms
error of s / sqrt(12) on data spread over its range, and the error model of the same graph
(accuracy.workflows.model.onnx_noise) predicts it; the spread allowed a correct port's rms falls to 1
with the number of elements."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from accuracy.judge.quantization import spread, sqnr_db
from accuracy.workflows.model import onnx_graph
from accuracy.workflows.model.onnx_noise import expected_noise, quantize_points

WELL_QUANTIZED = 1 / math.sqrt(12)  # TensorFlow Lite's rmse / scale of pure rounding
SIZE = 20000


def _qdq(step: float, zero: int):
    """x -> QuantizeLinear(step, zero, uint8) -> DequantizeLinear -> y."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(step, np.float32), "s"),
        numpy_helper.from_array(np.array(zero, np.uint8), "z"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SIZE])],
        constants,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@settings(max_examples=15, deadline=None)
@given(step=st.floats(1e-3, 10.0), zero=st.integers(0, 255), seed=st.integers(0, 2**32 - 1))
def test_onnx_runtimes_rounding_is_s_over_sqrt12_and_the_model_predicts_it(step, zero, seed):
    model = _qdq(step, zero)
    step32 = float(np.float32(step))
    low, high = (0 - zero) * step32, (255 - zero) * step32
    if high - low < 8 * step32:
        return
    x = np.random.Generator(np.random.PCG64(seed)).uniform(low + step32, high - step32, SIZE).astype(np.float32)
    y = onnx_graph.run(onnx_graph.session(model, optimized=False), {"x": x})["y"]
    measured = math.sqrt(float(np.mean((y.astype(np.float64) - x) ** 2)))
    # 20000 draws of a uniform: its rms to within 3% (the relative spread is 0.45%)
    assert measured / step32 == pytest.approx(WELL_QUANTIZED, rel=0.03)
    noise = expected_noise(model, {"x": x}, ["y"])["y"]
    assert math.sqrt(float(np.mean(noise.variance))) == pytest.approx(measured, rel=0.03)
    assert noise.clipped == 0 and not np.any(noise.clipping)
    (point,) = quantize_points(model)
    assert (point.kind, float(point.scale), int(point.zero_point), point.qmin, point.qmax) == (
        "activation", step32, zero, 0, 255
    )  # fmt: skip


def test_values_past_a_points_range_are_clipped_and_counted_apart():
    model = _qdq(0.1, 128)  # holds [-12.8, 12.7]
    x = np.linspace(-20, 20, SIZE).astype(np.float32)
    noise = expected_noise(model, {"x": x}, ["y"])["y"]
    outside = int(np.count_nonzero((x < -12.85) | (x > 12.75)))
    assert noise.clipped == outside  # past the range by more than the half step rounding takes
    assert np.count_nonzero(noise.clipping) >= outside
    assert np.all(noise.clipping[x > 13] == pytest.approx(12.7 - x[x > 13].astype(np.float64), abs=1e-5))


def test_the_spread_allowed_falls_with_the_elements_and_stays_above_1():
    sizes = [1, 10, 100, 1000, 10**5]
    spreads = [spread(n) for n in sizes]
    assert spreads == sorted(spreads, reverse=True)
    assert spreads[0] == pytest.approx(math.sqrt(15.137), rel=1e-3)  # chi2(1)'s upper 1e-4 point
    assert 1.0 < spreads[-1] < 1.03


def test_sqnr_of_a_known_error():
    signal = np.ones(100)
    assert sqnr_db(signal, np.full(100, 0.1)) == pytest.approx(20.0, rel=1e-12)
    assert sqnr_db(signal, np.zeros(100)) == math.inf


def test_a_graph_without_quantize_points_has_none():
    assert quantize_points(onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []))) == []
