"""The self-test of the quantization causes (issue 55): each bug injected into a zoo model's ONNX
Runtime int8 graph is named at its layer with its parameter fitted, and the correct quantized
ports get no cause."""

from __future__ import annotations

import pytest

from accuracy.workflows.model.cause_selftest import RIGHT, model_summary
from accuracy.workflows.model.ports.onnx_quantized import reduced_range
from accuracy.workflows.model.quantization_causes import AXIS, BIAS, SATURATES, SCALE, ZERO_POINT
from accuracy.workflows.model.quantization_selftest import quantization_selftest


@pytest.fixture(scope="module")
def measured():
    reports = list(quantization_selftest())
    return reports, model_summary(reports)


@pytest.mark.slow
def test_every_injected_quantization_bug_is_named_right_with_its_parameter(measured):
    reports, total = measured
    rows = {(r["model"], i["cause"]): i for r in reports for i in r["injections"]}
    cnn, transformer = "small_cnn (quantized)", "small_transformer (quantized)"
    assert rows[(cnn, SCALE)]["path"] == "conv2"  # conv1's weights hold bn1 folded in: not its module's
    assert rows[(cnn, SCALE)]["parameters"]["factor"] == pytest.approx(2.0, rel=1e-3)
    assert rows[(cnn, ZERO_POINT)]["parameters"] == {"shift": 3}
    assert rows[(cnn, AXIS)]["parameters"] == {"axis": 0}
    assert rows[(cnn, BIAS)]["parameters"]["factor"] == pytest.approx(1.5, rel=1e-3)
    assert rows[(transformer, AXIS)]["path"] == "proj" and rows[(transformer, AXIS)]["parameters"] == {"axis": 1}
    injected = [i for i in rows.values() if i["outcome"] != "not injected"]
    assert all(i["outcome"] == RIGHT for i in injected), [i for i in injected if i["outcome"] != RIGHT]
    # the int32 bias cause has no int32 bias in small_transformer (its Linear is MatMul + Add)
    assert rows[(transformer, BIAS)]["outcome"] == "not injected"
    assert ((cnn, SATURATES) in rows) == reduced_range()  # where the CPU lacks VNNI
    assert total["named_right_rate"] >= 0.95 and total["named_on_correct"] == 0


@pytest.mark.slow
def test_the_correct_quantized_ports_get_no_cause(measured):
    reports, _ = measured
    assert all(r["correct_ports"] == ["ort-int8", "ort-int8-tensor", "ort-int8-dynamic"] for r in reports)
    assert [c for r in reports for c in r["named_on_correct"]] == []
