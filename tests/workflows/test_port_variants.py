"""A variant of a kind of port is an argument of its builder, bound in the port table (issue 54),
never read from the port's name: a package that names its own `ort-int8` or torchao port gets the
variant it binds, and the built-in names still build the variants they did."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from accuracy.workflows.model.ports import build_port
from accuracy.workflows.model.ports.onnx_quantized import ort_int8
from accuracy.workflows.model.ports.torchao_port import TorchaoPort, torchao_port
from accuracy.workflows.model.zoo import example_inputs, small_cnn


def _weight_steps(port) -> int:
    """How many steps conv2's int8 weights have: one per output channel, or one for the tensor."""
    graph = port.graph.model.graph
    (scale,) = [numpy_helper.to_array(i) for i in graph.initializer if i.name == "conv2.weight_scale"]
    return int(np.asarray(scale).size)


def _ops(port) -> set[str]:
    return {n.op_type for n in port.graph.model.graph.node}


@pytest.mark.parametrize("name", ["mine", "ort-int8-dynamic"])
def test_an_onnx_quantized_ports_variant_is_the_argument_bound_not_its_name(name):
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    per_tensor = ort_int8(name, model, inputs, per_channel=False)
    per_channel = ort_int8(name, model, inputs, per_channel=True)
    assert (_weight_steps(per_tensor), _weight_steps(per_channel)) == (1, model.conv2.out_channels)
    assert "per-tensor weights" in per_tensor.description and "calibrated" in per_tensor.description
    dynamic = ort_int8(name, model, inputs, dynamic=True)
    assert "DynamicQuantizeLinear" in _ops(dynamic) and "QuantizeLinear" not in _ops(dynamic)
    assert "dynamic activations" in dynamic.description and "calibrated" not in dynamic.description


def test_the_built_in_names_build_the_variants_the_table_binds(monkeypatch):
    # the binding, not this CPU: under a oneDNN cap below its VNNI the dynamic port is absent (test_cpu_levels)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    assert _weight_steps(build_port("ort-int8", model, inputs)) == model.conv2.out_channels
    assert _weight_steps(build_port("ort-int8-tensor", model, inputs)) == 1
    assert "DynamicQuantizeLinear" in _ops(build_port("ort-int8-dynamic", model, inputs))
    weight = build_port("torchao-int8-weight", model, inputs)
    dynamic = build_port("torchao-int8-dynamic", model, inputs)
    assert isinstance(weight, TorchaoPort) and isinstance(dynamic, TorchaoPort)
    assert (weight.dynamic, dynamic.dynamic) == (False, True)


def test_a_torchao_ports_variant_is_the_argument_bound_not_its_name(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)  # the binding, not this CPU (as above)
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    for dynamic in (True, False):  # each under the other's name: the name decides nothing
        name = "torchao-int8-weight" if dynamic else "torchao-int8-dynamic"
        port = torchao_port(name, model, inputs, dynamic=dynamic)
        assert isinstance(port, TorchaoPort) and port.dynamic is dynamic
        kinds = [p["kind"] for p in port._point(port.quantized.fc)["points"]]
        assert kinds == (["weight", "dynamic"] if dynamic else ["weight"])
