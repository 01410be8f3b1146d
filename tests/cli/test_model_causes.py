"""Why, not only where: the catalogue of known port bugs (accuracy/workflows/model/causes/)
names the cause of a flagged unit, with its fitted parameter, and never names one for a unit
within rounding. Each port is a zoo model with one bug, handed over as a runtime's activations."""

from __future__ import annotations

import json

import pytest
import torch

from accuracy.core.json_output import dumps
from accuracy.judge.verdicts import WITHIN, Verdict
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.report import ModelReport
from accuracy.workflows.model.rows import PortResult, UnitRow
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.unit import CauseFinding
from accuracy.workflows.model.zoo import decoder, example_inputs, small_cnn, small_transformer


def _port(tmp_path, name: str, port) -> PortResult:
    inputs = example_inputs(name)
    calls, out = record(port, inputs)
    file = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
    x = write_arrays(tmp_path / "x.npz", inputs)
    (judged,) = run_model(
        ModelRun(f"accuracy.workflows.model.zoo:{name}", x, activations_files={"port": str(file)})
    ).ports
    return judged


def _row(port: PortResult, path: str) -> UnitRow:
    return next(r for r in port.layers if r.path == path)


def _bn_eps(model):
    model.bn1.eps = 1e-3
    return model


def _rms_eps(model):
    for m in model.modules():
        if type(m).__name__ == "RMSNorm":
            m.eps = 1e-6
    return model


def _tanh_gelu(model):
    model.gelu.approximate = "tanh"
    return model


def _bfloat16_weight(model):
    with torch.no_grad():
        model.conv2.weight.copy_(model.conv2.weight.to(torch.bfloat16).float())
    return model


@pytest.mark.parametrize(
    ("name", "make", "bug", "path", "cause", "parameter"),
    [
        ("small_cnn", small_cnn, _bn_eps, "bn1", "normalization eps", 1e-3),
        ("decoder", decoder, _rms_eps, "layers.0.input_layernorm", "normalization eps", 1e-6),
        ("small_transformer", small_transformer, _tanh_gelu, "gelu", "GELU approximation", None),
        ("small_cnn", small_cnn, _bfloat16_weight, "conv2", "weights in bfloat16", None),
    ],
    ids=["batchnorm-eps", "rmsnorm-eps", "tanh-gelu", "bfloat16-weight"],
)
def test_each_catalogued_bug_is_named_with_its_parameter(tmp_path, name, make, bug, path, cause, parameter):
    port = _port(tmp_path, name, bug(make().eval()))
    assert port.first_not_within == path
    found = _row(port, path).cause
    assert found.explains and found.name == cause and found.verdict == WITHIN
    if parameter is not None:
        (value,) = found.parameters.values()
        assert abs(value - parameter) <= 0.1 * parameter, value


def test_the_answer_line_names_the_cause(tmp_path):
    port = _port(tmp_path, "small_cnn", _bn_eps(small_cnn().eval()))
    _, where, why = ModelReport("small_cnn", "eval", {}, [port]).answers()
    assert where.startswith("  first not within rounding: bn1 (BatchNorm2d (batch_norm)): beyond rounding, ")
    assert why == (
        "  cause: explained by BatchNorm2d eps = 0.001 (Keras' and TensorFlow's default); this model has 1e-05; "
        "look closer: opbench explain batch_norm --dtype float32"
    )


def _gate_and_up_swapped(model):
    """A hand port whose MLP gates the other projection: a bug no catalogue entry covers."""
    mlp = model.layers[0].mlp
    mlp.forward = lambda x: mlp.down_proj(mlp.act_fn(mlp.up_proj(x)) * mlp.gate_proj(x))
    return model


def test_an_uncatalogued_bug_gets_no_known_cause(tmp_path):
    port = _port(tmp_path, "decoder", _gate_and_up_swapped(decoder()))
    found = _row(port, "layers.0.mlp").cause
    assert not found.explains and found.words is None
    _, where, why = ModelReport("decoder", "eval", {}, [port]).answers()
    assert where.startswith("  first not within rounding: layers.0.mlp (DecoderMLP)")
    assert why == "  cause: no known cause; look closer: this command with --explain-verdicts"


def test_a_correct_port_and_units_within_rounding_get_no_cause():
    report = run_model(ModelRun("accuracy.workflows.model.zoo:small_cnn", "x=2x3x8x8", ["threads:1", "onnxruntime"]))
    assert all(row.cause is None for port in report.ports for row in port.layers)


def test_a_finding_is_typed_here_and_json_only_at_the_edge(tmp_path):
    """The cause is a CauseFinding with the Verdict enum in Python; --json writes its fields in
    the order they had as a dict, and reading that JSON back gives the same finding."""
    port = _port(tmp_path, "small_cnn", _bn_eps(small_cnn().eval()))
    found = _row(port, "bn1").cause
    assert isinstance(found, CauseFinding) and found.verdict is Verdict.WITHIN and found.explains
    written = json.loads(dumps(ModelReport("small_cnn", "eval", {}, [port]).as_dict()))
    cause = next(r for r in written["ports"][0]["layers"] if r["path"] == "bn1")["cause"]
    assert list(cause) == ["name", "words", "parameters", "verdict", "ratio", "explains", "alternatives", "skipped"]
    assert cause["verdict"] == "within rounding" and CauseFinding.of(cause) == found
