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


def test_a_model_whose_weights_would_not_fit_is_refused_in_one_line_before_any_port(monkeypatch, capsys):
    """The estimate counts the weights, not only the activations: small_cnn's 8.7 KiB of
    activations fit anywhere, its run with the default ports does not fit below the estimate."""
    from accuracy.cli.main import main
    from accuracy.core import limits
    from accuracy.workflows.model import memory
    from accuracy.workflows.model.ports import default_ports
    from accuracy.workflows.model.zoo import small_cnn

    model = small_cnn()
    weights = memory.model_bytes(model)
    calls, _ = record(model, {"x": torch.zeros(2, 3, 8, 8)})
    held = memory.call_bytes(calls)
    assert sum(held) == 4 * (384 + 14 * 128 + 10)  # its 8 layers' float32 inputs and outputs on 2 images of 3x8x8
    needed = memory.needed_bytes(weights, held, default_ports(gpu=False))
    # each weight copy counted: the model, and the judge's float64 copy of a whole-model unit
    activations = memory.ACTIVATION_FACTOR * sum(held) + memory.LARGEST_CALL_FACTOR * max(held)
    assert needed == memory.RUNTIME_BYTES + weights * (1 + memory.JUDGE_COPIES) + activations
    built = []
    monkeypatch.setattr("accuracy.workflows.model.sweep.build_port", lambda *a, **k: built.append(a) or "never")
    monkeypatch.setattr(limits, "available_memory", lambda: needed - 1)
    assert main(["model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", "x=2x3x8x8"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and built == []
    assert f"the model's weights ({weights / (1 << 10):.3g} KiB) and its activations on x=2x3x8x8" in captured.err
    assert "more than the budget of" in captured.err and "nothing was judged" in captured.err


def test_a_large_weight_with_few_activations_is_counted():
    """A 64 MiB linear layer on one row: 0.5 KiB of activations, which the old estimate (60 bytes
    per activation byte) let through on 100 KiB of memory; its run holds the weight four times."""
    from accuracy.workflows.model import memory

    layer = nn.Sequential(nn.Linear(4096, 4096))
    calls, _ = record(layer, {"input": torch.zeros(1, 4096)})
    weights, held = memory.model_bytes(layer), memory.call_bytes(calls)
    assert weights == (4096 * 4096 + 4096) * 4 and sum(held) == 2 * 4096 * 4
    assert memory.needed_bytes(weights, held, ["torchscript"]) > 4 * weights


@pytest.mark.slow
def test_the_estimate_is_above_the_measured_peak_of_a_run(tmp_path):
    """small_cnn on 8,192 images with the default ports, in a process of its own (peak RSS is a
    process's high-water mark): the estimate is an upper bound of what it held."""
    import json
    import subprocess
    import sys

    script = (
        "import json, torch\n"
        # the high-water mark of this process's own memory: getrusage's ru_maxrss survives exec, so it
        # held the forking pytest worker's (3.4 GB after hundreds of tests, above this run's estimate)
        "def peak():\n"
        "    status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "    return int(status.split()[0]) * 1024\n"
        "from accuracy.workflows.model import memory, sweep\n"
        "from accuracy.workflows.model.trace import load_model, model_inputs, run_reference\n"
        "spec, inputs = 'accuracy.workflows.model.zoo:small_cnn', 'x=8192x3x8x8'\n"
        "model = load_model(spec, False)\n"
        "calls, _ = run_reference(model, model_inputs(inputs), inputs)\n"
        "report = sweep.run_model(sweep.ModelRun(spec, inputs))\n"
        "print(json.dumps({'needed': memory.needed_bytes(memory.model_bytes(model), memory.call_bytes(calls),"
        " [p.port for p in report.ports]), 'peak': peak(),"
        " 'flagged': sum(p.flagged for p in report.ports), 'ports': len(report.ports)}))\n"
    )
    env = {"OPBENCH_CACHE": str(tmp_path)}
    import os

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=os.environ | env
    )
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["ports"] == 3 and measured["flagged"] == 0
    assert measured["peak"] < measured["needed"]


def test_a_sessions_outputs_are_the_callers_own_memory_not_views_that_keep_its_arena():
    """ONNX Runtime returns views of its session's memory, which keep the session's arena alive
    while a port keeps the output for judging: every unit session's arena stayed, after the
    session was gone (a 4-layer Qwen2.5-shaped model's noopt port: 1.2 GB, measured)."""
    model, inputs = _mlp(), _inputs()
    port = OnnxPort("onnxruntime-noopt", model, inputs, optimized=False, apart=True)
    outputs = onnx_graph.run(port.graph.session(port.graph.model, optimized=False), inputs)
    for value in (*outputs.values(), *port.values.values()):
        assert value.flags.owndata and value.base is None
    np.testing.assert_array_equal(next(iter(outputs.values())), model(torch.from_numpy(inputs["input"])).detach())
    port.close()


def test_torchscripts_end_to_end_copy_keeps_its_traced_leaves_without_copying_their_weights():
    """The model's copy for the end-to-end run took its traced leaves in place of its own: each
    leaf's weights were copied only to be replaced (Qwen2.5-0.5B's 2 GB)."""
    from accuracy.workflows.model.ports import build_port

    model, inputs = _mlp(), _inputs()
    calls, _ = record(model, {"input": torch.from_numpy(inputs["input"])})
    with build_port("torchscript", model, inputs) as port:
        units = [u for u in port.units(calls) if not u.reason]
        for unit in units:
            port.isolated(unit, unit.calls[0].inputs)
        stand_ins = port._stand_ins()
        made = []
        real_to = torch.Tensor.to
        with pytest.MonkeyPatch.context() as patch:  # no weight of a traced leaf is copied, even for a moment

            def to(self, *args, **kwargs):
                out = real_to(self, *args, **kwargs)
                if out.data_ptr() != self.data_ptr():
                    made.append(tuple(self.shape))
                return out

            patch.setattr(torch.Tensor, "to", to)
            copied = converted(model, torch.float32, "cpu", stand_ins)
        assert made == []
        own = {p.data_ptr() for p in model.parameters()}
        assert {p.data_ptr() for p in copied.parameters()} == own  # the leaves' weights: the model's own
        assert len(stand_ins) == 3 and all(getattr(m, "ported", False) for m in stand_ins.values())  # ReLU too
        ran = port.end_to_end(inputs, units)
    expected = model(torch.from_numpy(inputs["input"])).detach().numpy()
    np.testing.assert_allclose(ran.output, expected, rtol=1e-6, atol=1e-6)
