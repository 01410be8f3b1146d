"""The self-test of the quantization causes (issue 55): each bug injected into a zoo model's ONNX
Runtime int8 graph is named at its layer with its parameter fitted, and the correct quantized
ports get no cause."""

from __future__ import annotations

import pytest

from accuracy.backends import cpu_levels
from accuracy.workflows.model.cause_selftest import RIGHT, model_summary
from accuracy.workflows.model.ports.onnx_quantized import reduced_range
from accuracy.workflows.model.quantization_causes import (
    AXIS,
    BIAS,
    OTHER_RANGE,
    PER_TENSOR,
    SATURATES,
    SCALE,
    STUCK_ZERO,
    ZERO_POINT,
)
from accuracy.workflows.model.quantization_selftest import quantization_selftest

pytestmark = pytest.mark.xdist_group("quantization-selftest")  # its self-test, measured once, not on each worker


@pytest.fixture(scope="module")
def measured():
    reports = list(quantization_selftest())
    onnx = [r for r in reports if r["model"].endswith("(quantized)")]
    return onnx, model_summary(onnx), [r for r in reports if r["model"].endswith("(torchao)")]


@pytest.mark.slow
def test_every_injected_quantization_bug_is_named_right_with_its_parameter(measured):
    reports, total, _ = measured
    rows = {(r["model"], i["cause"]): i for r in reports for i in r["injections"]}
    cnn, transformer = "small_cnn (quantized)", "small_transformer (quantized)"
    assert rows[(cnn, SCALE)]["path"] == "conv2"  # conv1's weights hold bn1 folded in: not its module's
    assert rows[(cnn, SCALE)]["parameters"]["factor"] == pytest.approx(2.0, rel=1e-3)
    assert rows[(cnn, ZERO_POINT)]["parameters"] == {"shift": 3}
    assert rows[(cnn, AXIS)]["parameters"] == {"axis": 0}
    assert rows[(cnn, BIAS)]["parameters"]["factor"] == pytest.approx(1.5, rel=1e-3)
    assert rows[(transformer, AXIS)]["path"] == "proj" and rows[(transformer, AXIS)]["parameters"] == {"axis": 1}
    for model in (cnn, transformer):  # integers quantized per tensor under per-channel steps: the step fitted
        row = rows[(model, PER_TENSOR)]
        assert row["parameters"]["tensor_step"] == pytest.approx(row["injected"], rel=0.01)
        # a zero point stuck at 0 and a range calibrated on other data: each unit within its noise, named
        # end to end at the unit of the point whose clipping moves the output most, with what it should be
        assert rows[(model, STUCK_ZERO)]["outcome"] == RIGHT
        assert rows[(model, STUCK_ZERO)]["parameters"]["zero_point"] == pytest.approx(
            rows[(model, STUCK_ZERO)]["injected"], abs=2
        )
        assert 0.1 < rows[(model, STUCK_ZERO)]["parameters"]["clipped_fraction"] < 0.9
        assert rows[(model, OTHER_RANGE)]["outcome"] == RIGHT
        assert set(rows[(model, OTHER_RANGE)]["parameters"]) == {"low", "high"}
    assert rows[(cnn, STUCK_ZERO)]["path"] == "fc" and rows[(transformer, STUCK_ZERO)]["path"] == "proj"
    injected = [i for i in rows.values() if i["outcome"] != "not injected"]
    assert all(i["outcome"] == RIGHT for i in injected), [i for i in injected if i["outcome"] != RIGHT]
    # the int32 bias cause has no int32 bias in small_transformer (its Linear is MatMul + Add)
    assert rows[(transformer, BIAS)]["outcome"] == "not injected"
    assert ((cnn, SATURATES) in rows) == reduced_range()  # where the CPU lacks VNNI
    assert total["named_right_rate"] >= 0.95 and total["named_on_correct"] == 0


def torchao_ports() -> tuple[str, ...]:
    """Both torchao ports, less the dynamic one where ONEDNN_MAX_CPU_ISA keeps oneDNN from the CPU's VNNI."""
    capped = cpu_levels.onednn_capped("int8")
    return ("torchao-int8-weight",) if capped else ("torchao-int8-weight", "torchao-int8-dynamic")


@pytest.mark.slow
def test_the_correct_quantized_ports_get_no_cause(measured):
    reports, _, torchao = measured
    assert all(r["correct_ports"] == ["ort-int8", "ort-int8-tensor", "ort-int8-dynamic"] for r in reports)
    assert all(r["correct_ports"] == list(torchao_ports()) for r in torchao)
    assert [c for r in reports + torchao for c in r["named_on_correct"]] == []


@pytest.mark.slow
def test_the_torchao_weight_bugs_are_named_right_with_their_parameters_in_both_ports(measured):
    """A torchao Int8Tensor's steps doubled, its integers 3 below (a zero point shifted by 3), its
    integers requantized with the largest row's step: each named at its Linear with its parameter,
    in torchao-int8-weight and torchao-int8-dynamic. small_cnn's one Linear (fc) has its rows' steps
    within 1% of each other: per tensor is per row there (requantized, 1.38x its noise), not injected."""
    _, _, torchao = measured
    assert [r["model"] for r in torchao] == ["small_cnn (torchao)", "small_transformer (torchao)"]
    rows = {(i["model"], i["cause"]): i for r in torchao for i in r["injections"]}
    assert {i["model"].rpartition(" ")[2] for r in torchao for i in r["injections"]} == set(torchao_ports())
    for port in torchao_ports():
        for model, layer in (("small_cnn", "fc"), ("small_transformer", "proj")):
            scaled, shifted = rows[(f"{model} {port}", SCALE)], rows[(f"{model} {port}", ZERO_POINT)]
            assert (scaled["outcome"], scaled["path"], shifted["outcome"], shifted["path"]) == (
                RIGHT,
                layer,
                RIGHT,
                layer,
            )
            assert scaled["parameters"]["factor"] == pytest.approx(2.0, rel=1e-3) and shifted["parameters"] == {
                "shift": 3
            }
        per_tensor = rows[(f"small_transformer {port}", PER_TENSOR)]
        assert per_tensor["outcome"] == RIGHT
        assert per_tensor["parameters"]["tensor_step"] == pytest.approx(per_tensor["injected"], rel=0.01)
        assert rows[(f"small_cnn {port}", PER_TENSOR)]["outcome"] == "not injected"  # fc's steps within 1%
