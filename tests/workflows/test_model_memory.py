"""What `opbench model` holds in memory: an exported port's weights in one file, read by each of
its sessions, never copied into its graph, its units' sub-graphs or the bytes sessions are made
from; the float64 reference converted weight by weight; the memory estimate an upper bound that
refuses what would not fit."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from accuracy.workflows.model import onnx_graph
from accuracy.workflows.model.ports.onnx_export import OnnxPort
from accuracy.workflows.model.trace import converted, record

WIDTH = 64


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).eval()


def _inputs() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(0).standard_normal((4, WIDTH)).astype(np.float32)}


def _weight_bytes(model: nn.Module) -> int:
    """The bytes of its weight matrices (its biases, 256 bytes each, stay in the graph with its shapes)."""
    return sum(p.nbytes for p in model.parameters() if p.nbytes >= onnx_graph.APART_BYTES)


def _held_bytes(proto) -> int:
    """The bytes of tensor data of APART_BYTES or more a graph holds in itself."""
    return sum(len(t.raw_data) for t in proto.graph.initializer if len(t.raw_data) >= onnx_graph.APART_BYTES)


@pytest.mark.parametrize("optimized", [True, False])
def test_an_exported_ports_weights_are_one_file_its_graph_and_sub_graphs_only_point_to(optimized):
    model, inputs = _mlp(), _inputs()
    calls, _ = record(model, {"input": torch.from_numpy(inputs["input"])})
    apart = OnnxPort("onnxruntime", model, inputs, optimized=optimized, apart=True)
    inside = OnnxPort("onnxruntime", model, inputs, optimized=optimized, apart=False)
    folder = apart.graph.folder
    assert folder is not None and inside.graph.folder is None
    weights = _weight_bytes(model)
    # the weights are in the file once, and the graph holds none of their bytes, only where they are
    assert (folder / onnx_graph.WEIGHTS_FILE).stat().st_size == weights == 2 * WIDTH * WIDTH * 4
    assert _held_bytes(apart.graph.model) == 0 and _held_bytes(inside.graph.model) >= weights
    large = [t for t in apart.graph.model.graph.initializer if np.prod(t.dims) * 4 >= onnx_graph.APART_BYTES]
    assert len(large) == 2  # the two weight matrices
    assert all(t.data_location == t.EXTERNAL for t in large)
    # so are the bytes each session is made from, and each unit's sub-graph
    assert len(apart.graph.model.SerializeToString()) < weights / 4
    units = [u for u in apart.units(calls) if not u.reason]
    assert units
    for unit in units:
        sub = apart.graph.extract(unit.detail["reads"], [unit.detail["gives"]])
        assert _held_bytes(sub) == 0
    # and the sessions read the same weights from the file: the same bits, unit by unit and end to end
    by_key = {u.key: u for u in inside.units(calls) if not u.reason}
    for unit in units:
        tensors = unit.calls[0].inputs
        np.testing.assert_array_equal(apart.isolated(unit, tensors), inside.isolated(by_key[unit.key], tensors))
    ran, reference = apart.end_to_end(inputs, units), inside.end_to_end(inputs, list(by_key.values()))
    np.testing.assert_array_equal(ran.output, reference.output)
    assert ran.outputs.keys() == reference.outputs.keys()
    for key, value in ran.outputs.items():
        np.testing.assert_array_equal(value, reference.outputs[key])
    apart.close()
    inside.close()
    assert not Path(folder).exists()  # the port's file goes with it


def test_the_float64_copy_is_converted_weight_by_weight_not_copied_whole_first(monkeypatch):
    """A whole copy at the model's own precision before the conversion held Qwen2.5-0.5B's 2 GB
    beside its float64 4 GB: no parameter is deep-copied, and the copy is the same."""
    model = _mlp()
    expected = copy.deepcopy(model).to(torch.float64)
    copied = []
    original = nn.Parameter.__deepcopy__
    monkeypatch.setattr(nn.Parameter, "__deepcopy__", lambda self, memo: copied.append(self) or original(self, memo))
    wide = converted(model, torch.float64)
    assert copied == []
    for (name, got), (_, want) in zip(wide.named_parameters(), expected.named_parameters(), strict=True):
        assert isinstance(got, nn.Parameter) and got.dtype == torch.float64, name
        assert torch.equal(got, want), name
    # a copy at the model's own dtype is still a copy: the port's runs never touch the model
    same = converted(model, torch.float32)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(same.parameters(), model.parameters(), strict=True))
