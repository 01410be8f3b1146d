"""Quantized ports judged against the quantization noise they declare (issue 55): correct ONNX
Runtime int8 ports of the zoo models flag nothing, their units' rms error about 1x what their
quantize points' uniform noise predicts; a user's quantized file with one wrong scale is flagged
at that unit, beyond its noise; a bad --calibration file is one line."""

from __future__ import annotations

import copy
import json

import numpy as np
import onnx
import pytest
import torch
from cli_runner import run_main
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.backends import cpu_levels
from accuracy.judge.verdicts import BEYOND, WITHIN_NOISE
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model import onnx_graph, zoo
from accuracy.workflows.model.ports.onnx_quantized import _quantized
from accuracy.workflows.model.ports.torchao_port import SYMMETRIC_ROW, linear_variance
from accuracy.workflows.model.trace import model_inputs

SMALL_CNN = "accuracy.workflows.model.zoo:small_cnn"
PORTS = ("ort-int8", "ort-int8-tensor", "ort-int8-dynamic")
# the ExecuTorch int8 tests on one worker: ExecuTorch's exporter, the XNNPACK backend's pattern
# graphs and torchao's PT2E are loaded once (the five tests: 96 CPU-s each in its own process,
# 44 together), not on every worker that draws one
EXECUTORCH_INT8 = pytest.mark.xdist_group("executorch-int8")


def _initializer(model, name: str):
    return next(t for t in model.graph.initializer if t.name == name)


def _ports(capsys, factory: str, shape: str, *extra: str) -> tuple[int, dict]:
    args = ["model", factory, "--inputs", shape, *(a for p in PORTS for a in ("--port", p)), *extra, "--json"]
    status, out, _ = run_main(capsys, *args)
    return status, json.loads(out)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "shape"), [("small_cnn", "x=2x3x8x8"), ("small_transformer", "x=2x4x16")])
def test_correct_onnx_runtime_int8_ports_flag_nothing_and_their_error_is_their_noise(capsys, model, shape):
    status, report = _ports(capsys, f"accuracy.workflows.model.zoo:{model}", shape)
    assert status == 0, report["absent_ports"]
    assert [p["port"] for p in report["ports"]] == list(PORTS)
    for port in report["ports"]:
        assert (port["flagged"], port["not_compared"]) == (0, 0)
        assert port["end_to_end"]["verdict"] == WITHIN_NOISE
        rows = [r for r in port["layers"] if "quantization" in r]
        assert len(rows) >= 3  # every layer with weights
        for row in rows:
            figures = row["quantization"]
            assert row["verdict"] == WITHIN_NOISE
            # measured 0.42 (a ReLU whose zeros are exact) to 1.58 (a Conv whose negative outputs the ReLU
            # after it clips): the noise, not a margin's worth more
            assert 0.3 < figures["ratio"] < 1.7, (port["port"], row["path"], figures["ratio"])
            assert figures["ratio"] < figures["threshold"]
            if not figures["clip_affected"]:  # SQNR counts the clipping too: 1 dB at that Conv
                assert 15 < figures["sqnr_db"] < 80
            assert figures["points"]


@pytest.mark.slow
def test_a_zero_point_stuck_at_0_leaves_every_unit_within_its_noise_and_the_output_flagged(capsys, tmp_path):
    """An asymmetric uint8 point whose zero point is 0 clips the negative range (ModelTC/MQBench
    PR #189): the unit's clipping is counted apart, the output's is error."""
    model, x = zoo.small_transformer().eval(), zoo.example_inputs("small_transformer")
    quantized = _quantized(onnx_graph.export(model, x), [x])
    zero = next(t for t in quantized.graph.initializer if t.name == "/proj/Add_output_0_zero_point")
    assert onnx.numpy_helper.to_array(zero) == 135  # the range calibrated: about half of it negative
    zero.CopyFrom(onnx.numpy_helper.from_array(np.zeros((), np.uint8), zero.name))
    path = tmp_path / "int8_zero_point.onnx"
    onnx.save(quantized, path)
    factory = "accuracy.workflows.model.zoo:small_transformer"
    status, out, _ = run_main(capsys, "model", factory, "--inputs", "x=2x4x16", "--onnx", f"bug={path}", "--json")
    assert status == 1
    port = json.loads(out)["ports"][0]
    assert port["flagged"] == 0 and {r["verdict"] for r in port["layers"]} == {WITHIN_NOISE}
    proj = next(r for r in port["layers"] if r["path"] == "proj")["quantization"]
    assert proj["clip_affected"] == 84 and proj["clip_rms"] > 50 * proj["expected_rms"]  # shown, counted apart
    end = port["end_to_end"]
    assert end["verdict"] == BEYOND and "beyond its quantization noise" in end["reason"]
    assert end["quantization"]["ratio"] > 10  # measured 19.7
    assert end["first_departs"] == "proj"  # the unit whose clipping, counted apart there, changed most
    # named, with the zero point the values' range gives it on these inputs and the fraction clipped
    scale = float(onnx.numpy_helper.to_array(_initializer(quantized, "/proj/Add_output_0_scale")))
    with torch.no_grad():
        values = model.double().proj(torch.from_numpy(model_inputs("x=2x4x16")["x"]).double()).numpy()
    cause = end["cause"]
    assert (cause["name"], cause["path"], cause["explains"]) == ("asymmetric zero point stuck at 0", "proj", True)
    assert abs(cause["parameters"]["zero_point"] - round(-min(values.min(), 0) / scale)) <= 2  # measured 148
    assert cause["parameters"]["clipped_fraction"] == pytest.approx(np.mean(values < -scale / 2), abs=0.02)
    assert cause["verdict"] == WITHIN_NOISE  # the output less its points' clipping: within its noise


@pytest.mark.slow
def test_a_quantized_file_with_a_wrong_weight_scale_is_flagged_at_that_layer(capsys, tmp_path):
    model, x = zoo.small_cnn().eval(), zoo.example_inputs("small_cnn")
    quantized = _quantized(onnx_graph.export(model, x), [x])
    scale = next(t for t in quantized.graph.initializer if t.name == "conv2.weight_scale")
    doubled = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(scale) * 2, scale.name)
    scale.CopyFrom(doubled)  # the weights dequantized at twice their step: a wrong scale factor
    path = tmp_path / "int8_bug.onnx"
    onnx.save(quantized, path)
    status, out, _ = run_main(capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--onnx", f"bug={path}", "--json")
    assert status == 1
    port = json.loads(out)["ports"][0]
    rows = {r["path"]: r for r in port["layers"]}
    assert port["first_not_within"] == "conv2"
    assert rows["conv2"]["verdict"] == BEYOND
    assert "beyond its quantization noise" in rows["conv2"]["reason"]
    assert rows["conv2"]["quantization"]["ratio"] > 30  # measured 81.9
    assert rows["conv1"]["verdict"] == WITHIN_NOISE  # before it: its own noise
    assert 0.5 < rows["conv1"]["quantization"]["ratio"] < 1.5
    assert port["end_to_end"]["verdict"] == BEYOND


@pytest.mark.slow
def test_calibration_on_another_file_is_read_and_a_bad_one_is_one_line(capsys, tmp_path):
    given = model_inputs("x=2x3x8x8")["x"]
    other = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    good = write_arrays(tmp_path / "calibration.npz", {"x": np.concatenate([other, given])})  # two batches
    status, out, _ = run_main(
        capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "ort-int8", "--calibration", good, "--json"
    )
    port = json.loads(out)["ports"][0]
    assert "calibrated on calibration.npz" in port["description"]
    assert status == 0 and port["flagged"] == 0
    # calibrated on other data alone: one of the 10 outputs past its range, clipped: counted as error there
    narrow = write_arrays(tmp_path / "other.npz", {"x": other})
    status, out, _ = run_main(
        capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "ort-int8", "--calibration", narrow, "--json"
    )
    end = json.loads(out)["ports"][0]["end_to_end"]
    assert status == 1 and end["verdict"] == BEYOND
    assert "changed by clipping, counted as error" in end["reason"]
    # named at fc's output point, the range fitted: what fc's values span on these inputs (0 included)
    model = zoo.small_cnn().eval().double()
    with torch.no_grad():
        fc = model(torch.from_numpy(given).double()).numpy()
    cause = end["cause"]
    assert (cause["name"], cause["path"], end["first_departs"]) == ("range calibrated on other data", "fc", "fc")
    width = max(fc.max(), 0) - min(fc.min(), 0)
    assert abs(cause["parameters"]["low"] - min(fc.min(), 0)) < 0.05 * width
    assert abs(cause["parameters"]["high"] - max(fc.max(), 0)) < 0.05 * width
    wrong = write_arrays(tmp_path / "wrong.npz", {"x": other[:, :2]})
    for path, words in ((wrong, "has shape (2, 2, 8, 8)"), (tmp_path / "missing.npz", "--calibration")):
        status, out, err = run_main(
            capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "ort-int8", "--calibration", path
        )
        assert status == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and words in err


@pytest.mark.slow
def test_the_text_and_the_page_give_each_units_noise_in_other_tools_figures(capsys, tmp_path):
    page = tmp_path / "model.html"
    status, text, _ = run_main(
        capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "ort-int8-dynamic", "--html", page
    )
    assert status == 0
    lines = text.splitlines()
    at = lines.index("ort-int8-dynamic: each unit against its quantization noise:")
    assert lines[at + 1].split() == [
        "layer", "expected", "rms", "rms", "ratio", "flags", "over", "rmse/scale", "SQNR", "own", "dB", "SQNR", "acc",
        "dB", "clipped",
    ]  # fmt: skip
    fc = next(line.split() for line in lines[at + 3 :] if line.startswith("fc "))
    ratio, own, accumulated = float(fc[3]), float(fc[6]), float(fc[7])
    assert 0.5 < ratio < 1.3 and 35 < own < 60 and 35 < accumulated < 60  # measured 0.715, 46.3, 42.6 dB
    assert f"within quantization noise  {fc[3]}x noise" in text  # the fc row of the verdict table: the same ratio
    assert any(line.startswith("ort-int8-dynamic: output: rms ") for line in lines)
    html = page.read_text()
    assert "<h3>Each unit against its quantization noise</h3>" in html
    assert "<td class='cyan'>within quantization noise</td>" in html


@pytest.mark.slow
def test_torchaos_int8_ports_flag_nothing_and_their_linear_layers_error_is_their_noise(capsys):
    factory = "accuracy.workflows.model.zoo:small_transformer"
    args = ["--port", "torchao-int8-weight", "--port", "torchao-int8-dynamic", "--json"]
    status, out, _ = run_main(capsys, "model", factory, "--inputs", "x=2x4x16", *args)
    assert status == 0
    result, capped = json.loads(out), cpu_levels.onednn_capped("int8")
    # where ONEDNN_MAX_CPU_ISA keeps oneDNN from the CPU's VNNI, torch._int_mm saturates: the dynamic port is absent
    assert result["absent_ports"] == ([{"port": "torchao-int8-dynamic", "reason": capped}] if capped else [])
    assert len(result["ports"]) == (1 if capped else 2)
    for port in result["ports"]:
        rows = {r["path"]: r for r in port["layers"]}
        assert port["flagged"] == 0 and port["end_to_end"]["verdict"] == WITHIN_NOISE
        for path in ("proj", "up", "down"):  # the Linear layers torchao quantizes
            assert rows[path]["verdict"] == WITHIN_NOISE
            assert 0.8 < rows[path]["quantization"]["ratio"] < 1.3  # measured 0.94 to 1.17
        assert rows["norm"]["verdict"] == "within rounding"  # PyTorch's own LayerNorm, judged as any
        assert 0.8 < port["end_to_end"]["quantization"]["ratio"] < 1.3  # measured 1.02 and 1.03


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dynamic=st.booleans())
def test_the_closed_form_variance_of_a_linear_layer_is_that_of_rounding_its_weights(seed, dynamic):
    """Rounding each weight row to its step (and each input row to its own, dynamic) gives each
    output the variance linear_variance predicts: measured over 4000 random offsets of the grid."""
    rng = np.random.Generator(np.random.PCG64(seed))
    x, weight = rng.standard_normal((3, 24)), rng.standard_normal((5, 24))
    steps = np.abs(weight).max(axis=1) / 127
    row_steps = np.abs(x).max(axis=1, keepdims=True) / SYMMETRIC_ROW
    draws = 4000  # a random offset of each grid in each draw: rounding error uniform on a step
    w = weight + rng.uniform(-0.5, 0.5, (draws, *weight.shape)) * steps[:, None]
    xs = x + rng.uniform(-0.5, 0.5, (draws, *x.shape)) * row_steps if dynamic else x
    measured = np.mean(np.square(xs @ w.transpose(0, 2, 1) - x @ weight.T), axis=0)
    predicted = linear_variance(x, weight, steps, dynamic)
    # 4000 draws: each variance to about 3% (the second-order term x-noise * w-noise is 1e-4 of it)
    np.testing.assert_allclose(measured, predicted, rtol=0.1)


@pytest.mark.slow
def test_openvinos_int8_port_through_nncf_flags_nothing_and_its_error_is_its_noise(capsys):
    """32 images, not 2: the output's RMS error is a sample of its noise, and 2 images' (20 values)
    gave 1.03 on a Zen 3 AVX2 host and 1.52 on a Zen 4 AVX-512 VNNI host, whose int8 kernels round
    otherwise; 32 images give 0.96 there."""
    factory = "accuracy.workflows.model.zoo:small_cnn"
    status, out, _ = run_main(capsys, "model", factory, "--inputs", "x=32x3x8x8", "--port", "openvino-int8", "--json")
    assert status == 0
    (port,) = json.loads(out)["ports"]
    rows = {r["path"]: r for r in port["layers"]}
    assert (port["flagged"], port["not_compared"]) == (0, 0)
    for path in ("conv1", "conv2", "fc"):  # the layers NNCF quantizes: their input and their weights
        figures = rows[path]["quantization"]
        assert rows[path]["verdict"] == WITHIN_NOISE
        assert 0.7 < figures["ratio"] < 1.4  # measured 1.00, 0.78, 0.97 (Zen 4)
        assert {p["kind"] for p in figures["points"]} == {"activation", "weight"}
    assert rows["relu"]["verdict"] == "within rounding"  # NNCF leaves a ReLU alone in float
    end = port["end_to_end"]
    assert end["verdict"] == WITHIN_NOISE and 0.7 < end["quantization"]["ratio"] < 1.4  # measured 0.96


def _fake_quantized(step: float, levels: int, shape: tuple):
    """x -> FakeQuantize on [-(levels - 1) / 2, (levels - 1) / 2] steps -> x times 1: an
    OpenVINO model with one activation point."""
    import openvino
    import openvino.opset13 as ops

    x = ops.parameter(list(shape), openvino.Type.f32)
    low, high = np.float32(-(levels - 1) / 2 * step), np.float32((levels - 1) / 2 * step)
    quantized = ops.fake_quantize(x, low, high, low, high, levels)
    return openvino.Model([ops.multiply(quantized, np.float32(1.0))], [x])


@pytest.mark.parametrize("step", [0.01, 0.25])
def test_openvinos_fake_quantize_rounds_with_the_noise_its_error_model_predicts(step):
    """OpenVINO's own FakeQuantize on 4096 values inside its range errs by step / sqrt(12) rms,
    which the error model built from the node (its range and levels) predicts; a value outside
    the range is counted as clipped."""
    import openvino

    from accuracy.workflows.model.ports.openvino_int8 import error_model

    core = openvino.Core()

    def compiled(model):
        return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

    rng = np.random.Generator(np.random.PCG64(1))
    x = rng.uniform(-100 * step, 100 * step, (1, 4096)).astype(np.float32)
    model = _fake_quantized(step, 256, x.shape)
    actual = np.asarray(compiled(model)([x])[0], np.float64) - x
    noise = error_model(openvino, compiled, model, [x])
    assert np.sqrt(np.mean(actual**2)) == pytest.approx(step / np.sqrt(12), rel=0.05)
    assert np.sqrt(np.mean(noise["variance"])) == pytest.approx(step / np.sqrt(12), rel=0.05)
    assert noise["clipped"] == 0 and noise["points"][0]["scale"] == pytest.approx(step, rel=1e-6)
    x[0, 0] = 1000 * step  # past the range's 127.5 steps
    assert error_model(openvino, compiled, model, [x])["clipped"] == 1


def test_an_openvino_int8_model_with_a_doubled_weight_step_is_beyond_its_noise():
    """small_cnn quantized by NNCF, then conv2's per-channel weight step doubled (a wrong scale):
    its output against the float64 model is beyond the noise its points predict; as NNCF gave
    it, within."""
    import openvino
    import openvino.opset13 as ops
    import torch

    from accuracy.judge.verdicts import SUSPICIOUS
    from accuracy.workflows.model.ports.deploy import first_output
    from accuracy.workflows.model.ports.openvino_int8 import OpenVinoInt8Port, error_model
    from accuracy.workflows.model.quantization import noise_figures, verdict_of

    model = zoo.small_cnn().eval()
    x = model_inputs("x=2x3x8x8")["x"].astype(np.float32)
    port = OpenVinoInt8Port("openvino-int8", model, {"x": x}, None)
    with torch.no_grad():
        quantized = port._quantize(port._ov_model(first_output(model), (torch.from_numpy(x),)), [[x]])
        reference = model.double()(torch.from_numpy(x).double()).numpy()
    arrays = [x]

    def judged(ov_model) -> str:
        output = np.asarray(port._compile(ov_model)(arrays)[0])
        noise = error_model(openvino, port._compile, ov_model, arrays)
        return verdict_of(noise_figures(output, reference, noise, apart=False))[0]

    assert judged(quantized) == WITHIN_NOISE
    (conv2,) = [
        n for n in quantized.get_ordered_ops() if n.get_friendly_name().endswith("conv2/aten::_convolution/Convolution")
    ]
    step = conv2.input_value(1).get_node()  # Multiply(Convert(int8 weights), per-channel step)
    scale = step.input_value(1).get_node()
    step.input(1).replace_source_output(ops.constant(2 * scale.get_data()).output(0))
    assert judged(quantized) in (SUSPICIOUS, BEYOND)


@pytest.mark.slow
@EXECUTORCH_INT8
def test_executorchs_int8_port_through_the_xnnpack_quantizer_flags_nothing_and_its_error_is_its_noise(capsys):
    args = ["--inputs", "x=2x3x8x8", "--port", "executorch-int8", "--json"]
    status, out, _ = run_main(capsys, "model", SMALL_CNN, *args)
    assert status == 0
    (port,) = json.loads(out)["ports"]
    rows = {r["path"]: r for r in port["layers"]}
    assert (port["flagged"], port["not_compared"]) == (0, 0) and "XNNPACKQuantizer" in port["description"]
    for path in ("conv1", "conv2", "fc"):  # the layers the quantizer annotates: their input, output and weights
        figures = rows[path]["quantization"]
        assert rows[path]["verdict"] == WITHIN_NOISE
        assert 0.7 < figures["ratio"] < 1.4  # measured 0.99, 0.918, 1.13
        assert {p["kind"] for p in figures["points"]} == {"activation", "weight"}
        (weight,) = [p for p in figures["points"] if p["kind"] == "weight"]
        assert weight["axis"] == 0 and weight["range"] == [-127, 127] and weight["channels"] > 1
    assert rows["bn1"]["verdict"] == "within rounding"  # a BatchNorm alone: left in float by the quantizer
    end = port["end_to_end"]
    assert end["verdict"] == WITHIN_NOISE and 0.4 < end["quantization"]["ratio"] < 1.4  # measured 0.687


@pytest.mark.slow
@EXECUTORCH_INT8
def test_an_executorch_int8_program_with_a_doubled_weight_step_is_beyond_its_noise():
    """small_cnn quantized by the XNNPACK quantizer, then conv2's per-channel weight steps doubled
    in the converted graph before lowering: ExecuTorch's output against the float64 model is beyond
    the noise its points predict; as converted, within."""
    from accuracy.judge.verdicts import SUSPICIOUS
    from accuracy.workflows.model.ports.deploy import first_output
    from accuracy.workflows.model.ports.executorch_int8 import ExecuTorchInt8Port, _points, error_model
    from accuracy.workflows.model.quantization import noise_figures, verdict_of

    model = zoo.small_cnn().eval()
    x = torch.from_numpy(model_inputs("x=2x3x8x8")["x"].astype(np.float32))
    port = ExecuTorchInt8Port("executorch-int8", model, {"x": x.numpy()}, None)
    quantized = port._quantized(first_output(model), [(x,)])
    with torch.no_grad():  # a copy: the converted graph holds the model's own biases
        reference = copy.deepcopy(model).double()(x.double()).numpy()

    def judged() -> str:
        output = port._program(quantized, (x,))([x.numpy()])[0]
        return verdict_of(noise_figures(output, reference, error_model(quantized, (x,)), apart=False))[0]

    assert judged() == WITHIN_NOISE
    weights = [p for p in _points(quantized) if p[0] == "weight"]
    assert len(weights) == 3  # conv1, conv2, fc: one per-channel point each
    scales = weights[1][1].args[1]  # conv2's dequantize_per_channel: (integers, scales, zero points, axis, ...)
    getattr(quantized, scales.target).mul_(2)
    assert judged() in (SUSPICIOUS, BEYOND)  # flagged: the output is one draw over 20 values


def _torchao_bug(weight, bug: str) -> float:
    """A torchao Int8Tensor changed in place: its steps doubled, or its integers quantized again
    with one step, the largest row's, under its per-row steps; the parameter injected."""
    with torch.no_grad():
        if bug == "wrong weight scale":
            weight.scale.mul_(2)
            return 2.0
        steps = weight.scale
        weight.qdata.copy_(torch.round(weight.qdata.float() * steps / steps.max()).to(torch.int8))
        return float(steps.max())


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["wrong weight scale", "per-tensor integers under per-channel steps"])
def test_a_bug_in_a_torchao_linear_is_named_with_its_parameter_and_the_causes_that_cannot_apply_say_why(bug):
    from accuracy.workflows.model.ports.torchao_port import TorchaoPort
    from accuracy.workflows.model.quantization_causes import BIAS, OTHER_RANGE, SATURATES, STUCK_ZERO
    from accuracy.workflows.model.sweep import evaluate_ports
    from accuracy.workflows.model.trace import run_reference

    model, given = zoo.small_transformer().eval(), zoo.example_inputs("small_transformer")
    calls, _ = run_reference(model, given, "small_transformer")
    port = TorchaoPort("torchao-int8-weight", model)
    injected = _torchao_bug(port.quantized.get_submodule("up").weight, bug)
    results, _ = evaluate_ports([port], model, given, calls)
    rows = {r.path: r for r in results[0].layers}
    assert [p for p, r in rows.items() if r.verdict not in (WITHIN_NOISE, "within rounding")] == ["up"]
    cause = rows["up"].cause
    assert cause.name == bug and cause.explains
    (fitted,) = cause.parameters.values()
    assert fitted == pytest.approx(injected, rel=0.01)  # measured 1.9994; the largest row's step to 0.1%
    skipped = {s.name: s.reason for s in cause.skipped}
    assert set(skipped) == {BIAS, SATURATES, STUCK_ZERO, OTHER_RANGE} and all(skipped.values())


@pytest.mark.slow
@EXECUTORCH_INT8
def test_executorch_int8_quantizes_the_leaves_in_one_pass_and_names_a_doubled_weight_step_in_one_with_its_factor():
    """small_transformer's leaves quantized, lowered and loaded as one program (one PT2E pass: a
    BatchNorm's QAT folding alone costs about 25 s of patterns a pass), each part calibrated on
    its leaf's own inputs: `up` cut from it declares the points `up` quantized alone declares, and
    its error model reads those points only. Then `up`'s per-channel weight steps doubled in that
    converted graph before lowering: that unit alone is flagged, and the weights read from the
    graph name a wrong weight scale of factor 2. (One test: both claims are on the one pass.)"""
    from accuracy.workflows.model.ports.deploy import _out_of_place
    from accuracy.workflows.model.ports.executorch_int8 import ExecuTorchInt8Port, _point_row, _points, part_graph
    from accuracy.workflows.model.ports.executorch_port import _quiet
    from accuracy.workflows.model.sweep import evaluate_ports
    from accuracy.workflows.model.trace import run_reference

    model, given = zoo.small_transformer().eval(), zoo.example_inputs("small_transformer")
    up = tuple(model.up.weight.shape)
    calls, _ = run_reference(model, given, "small_transformer")
    passes: list = []

    class DoubledStep(ExecuTorchInt8Port):
        def _quantized(self, module, batches):
            passes.append(module)
            return super()._quantized(module, batches)

        def units(self, calls):
            self.built = super().units(calls)
            self.passes = len(passes)  # the passes the leaves took
            return self.built

        def convert(self, module, example):  # the leaves' one program: `up` is the part whose weight has its shape
            quantized = self._quantized(module, [example])
            with _quiet():  # copying the graph module: torch's deprecation of a pytree spec class
                self.as_converted = copy.deepcopy(quantized)
            (weight,) = [p for p in _points(quantized) if p[0] == "weight" and getattr(quantized, p[2]).shape == up]
            getattr(quantized, weight[1].args[1].target).mul_(2)
            program = self._program(quantized, example)
            self._graphs[id(program)] = quantized
            return program

    port = DoubledStep("executorch-int8", model, given, None)
    results, _ = evaluate_ports([port], model, given, calls)
    assert port.passes == 1 and all("part" in u.detail for u in port.built)
    (unit,) = [u for u in port.built if u.key == "up"]
    cut = part_graph(port.as_converted, unit.detail["part"])
    alone = port._quantized(_out_of_place(model.up), [tuple(unit.calls[0].inputs)])

    def points(graph) -> list[tuple]:
        return [(r["kind"], r["scale"], r["zero_point"], r["range"]) for r in map(_point_row, _points(graph))]

    assert points(cut) == points(alone) and len(points(alone)) == 3  # its input, its weights, its output
    rows = {r.path: r for r in results[0].layers}
    assert [p for p, r in rows.items() if r.verdict not in (WITHIN_NOISE, "within rounding")] == ["up"]
    cause = rows["up"].cause
    assert cause.name == "wrong weight scale" and cause.explains
    assert cause.parameters["factor"] == pytest.approx(2.0, rel=0.01)  # measured 1.9998


@pytest.mark.slow
@EXECUTORCH_INT8
def test_the_qat_conv_bn_patterns_are_left_out_only_where_none_can_match(monkeypatch):
    """The XNNPACK quantizer's QAT conv-BN annotations and convert_pt2e's folding export their
    patterns on every pass (about 5 and 11-25 CPU-s): both kept where a pattern could match (a
    convolution's output into a BatchNorm; torchao's folded pattern), both left out for a
    BatchNorm leaf prepared for post-training quantization, which stays in float as it was."""
    import torch.nn.functional as F
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils import OP_TO_ANNOTATOR
    from torchao.quantization.pt2e import qat_utils, quantize_pt2e
    from torchao.quantization.pt2e.utils import _get_aten_graph_module_for_pattern

    from accuracy.workflows.model.ports.executorch_int8 import (
        ExecuTorchInt8Port,
        conv_bn_possible,
        qat_folding_where_possible,
    )

    folded, annotated = [], []

    def folding(graph):
        folded.append(graph)
        return graph

    monkeypatch.setattr(quantize_pt2e, "_fold_conv_bn_qat", folding)
    example = (torch.randn(1, 1, 3, 3), torch.randn(1, 1, 1, 1), *(torch.randn(1) for _ in range(4)))
    for bias in (True, False):
        kwargs = qat_utils._get_quantized_conv_bn_example_inputs_kwargs(True, bias, bias, False)
        pattern = qat_utils._get_quantized_qat_conv_bn_pattern(True, bias, bias, F.conv2d, False)
        graph = _get_aten_graph_module_for_pattern(pattern, example, False, **kwargs)
        with qat_folding_where_possible():
            quantize_pt2e._fold_conv_bn_qat(graph)
        assert conv_bn_possible(graph) and folded.pop() is graph  # folded: torchao's own pattern
    model = zoo.small_cnn().eval()
    x = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(0))
    conv_bn = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), model.bn1).eval()
    assert conv_bn_possible(torch.export.export(conv_bn, (x,)).module())

    for name in ("conv_bn", "conv_bn_relu", "conv_transpose_bn", "conv_transpose_bn_relu"):
        monkeypatch.setitem(OP_TO_ANNOTATOR, name, lambda *args, name=name: annotated.append(name))
    port = ExecuTorchInt8Port("executorch-int8", model, zoo.example_inputs("small_cnn"), None)
    quantized = port._quantized(model.bn1, [(x,)])
    assert folded == [] and annotated == [] and quantize_pt2e._fold_conv_bn_qat is folding  # restored
    with torch.no_grad():
        assert torch.equal(quantized(x), model.bn1(x))  # a BatchNorm alone: left in float
