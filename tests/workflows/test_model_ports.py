"""The `torchscript` port of `opbench model` (#24): TorchScript run from C++ (LibTorch), or
TorchScript in-process where no C++ compiler is, and the report says which ran.

Each leaf is traced in Python, saved, loaded by torch::jit::load in the LibTorch extension and
called with Module::forward, in isolation and end to end. The C++ op is counted through a
wrapper around torch.ops.opbench_libtorch.script_forward, so a port that quietly ran in-process
would count none. The models are accuracy.workflows.model.zoo's small ones."""

from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
import torch
from hidden_tools import hide
from user_modules import user_module

from accuracy.backends import get_backend
from accuracy.cli.main import main
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.ports import build_port
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import load_model, record
from accuracy.workflows.model.zoo import example_inputs

FROM_CPP = "TorchScript from C++ (LibTorch)"
NO_COMPILER = "TorchScript in-process (no C++ compiler)"
MODELS = ["small_cnn", "small_transformer"]


def _spec(model: str) -> str:
    return f"accuracy.workflows.model.zoo:{model}"


def _count_cpp_forwards(monkeypatch) -> list[int]:
    """The handles script_forward is called with, one per call of the C++ op."""
    namespace = get_backend("libtorch").namespace
    real, handles = namespace.script_forward, []

    def counted(handle, inputs):
        handles.append(handle)
        return real(handle, inputs)

    monkeypatch.setattr(namespace, "script_forward", counted)
    return handles


@pytest.mark.parametrize("model", MODELS)
def test_torchscript_runs_each_leaf_from_cpp_and_a_correct_port_flags_no_layer(monkeypatch, tmp_path, model):
    handles = _count_cpp_forwards(monkeypatch)
    inputs = write_arrays(tmp_path / "x.npz", example_inputs(model))
    report = run_model(ModelRun(_spec(model), inputs, ["torchscript"]))
    (port,) = report.ports
    assert port.description == FROM_CPP
    assert report.within_rounding and port.flagged == 0 and port.not_compared == 0
    calls, _ = record(load_model(_spec(model)), example_inputs(model))
    assert port.compared == len(calls)
    # every leaf call once on identical inputs and once end to end; one C++ module per leaf module
    assert len(handles) == 2 * len(calls)
    assert len(set(handles)) == len({c.path for c in calls})


READS_A_LEAF = """
import torch

class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3, stride=2)

    def forward(self, x):
        assert x.shape[-1] % self.conv.stride[0] == 0  # as Whisper's encoder checks its input length
        return self.conv(x)

def encoder():
    torch.manual_seed(0)
    return Encoder().eval()
"""


def test_a_forward_that_reads_a_leafs_attributes_runs_with_the_leaf_traced(tmp_path, monkeypatch):
    """Whisper's encoder reads its convolutions' `stride`: the census found the torchscript port
    absent ("'Ported' object has no attribute 'stride'"), as a traced leaf kept only its tensors."""
    with user_module(tmp_path, monkeypatch, "reads_a_leaf", READS_A_LEAF):
        inputs = write_arrays(
            tmp_path / "x.npz", {"x": np.random.default_rng(0).standard_normal((2, 4, 16), np.float32)}
        )
        report = run_model(ModelRun("reads_a_leaf:encoder", inputs, ["torchscript"]))
    assert report.absent == [] and report.within_rounding
    (port,) = report.ports
    assert (port.compared, port.flagged) == (1, 0)


@pytest.mark.parametrize("model", MODELS)
def test_cpp_gives_in_process_torchscript_bits(monkeypatch, model):
    """The same traced graph, run by the same libtorch_cpu and graph executor from C++ as from
    Python, and torch.jit.save / torch::jit::load keep the parameters bit for bit: so every
    output is bitwise the same, in isolation and end to end."""
    reference, inputs = load_model(_spec(model)), example_inputs(model)
    calls, _ = record(reference, inputs)
    cpp = build_port("torchscript", reference, inputs)
    hide(monkeypatch, commands=("c++",))
    in_process = build_port("torchscript", reference, inputs)
    assert (cpp.description, in_process.description) == (FROM_CPP, NO_COMPILER)
    units = cpp.units(calls)
    for unit in units:
        ours, theirs = (p.isolated(unit, unit.calls[0].inputs) for p in (cpp, in_process))
        assert ours.dtype == theirs.dtype == np.float32 and ours.tobytes() == theirs.tobytes(), unit.key
    ours, theirs = (p.end_to_end(inputs, units) for p in (cpp, in_process))
    assert ours.outputs.keys() == theirs.outputs.keys() == {c.key for c in calls}
    assert all(ours.outputs[k].tobytes() == theirs.outputs[k].tobytes() for k in ours.outputs)
    assert ours.output.tobytes() == theirs.output.tobytes()


def test_without_a_compiler_torchscript_runs_in_process_and_says_so(monkeypatch, capsys, tmp_path):
    handles = _count_cpp_forwards(monkeypatch)
    hide(monkeypatch, commands=("c++",))
    inputs = str(write_arrays(tmp_path / "x.npz", example_inputs("small_cnn")))
    status = main(["model", _spec("small_cnn"), "--inputs", inputs, "--port", "torchscript", "--json"])
    (port,) = json.loads(capsys.readouterr().out)["ports"]
    assert status == 0 and port["description"] == NO_COMPILER and port["flagged"] == 0 and port["compared"] == 8
    assert main(["model", _spec("small_cnn"), "--inputs", inputs, "--port", "torchscript"]) == 0
    assert f"torchscript [float32]: {NO_COMPILER}; layer by layer" in capsys.readouterr().out
    assert handles == []  # nothing ran from C++


def test_a_cpp_module_gives_the_traced_bits_and_is_freed_with_its_python_object():
    backend = get_backend("libtorch")
    layer = torch.nn.Linear(4, 3).eval()
    x = torch.linspace(-2, 2, 8).reshape(2, 4)
    traced = torch.jit.trace(layer, (x,), check_trace=False)
    script = backend.script(traced)
    handle = script.handle
    with torch.no_grad():
        assert script(x).numpy().tobytes() == traced(x).numpy().tobytes()
    del script
    gc.collect()
    with pytest.raises(RuntimeError, match=f"no loaded TorchScript module has handle {handle}"):
        backend.namespace.script_forward(handle, [x])


def test_a_failed_libtorch_build_runs_in_process_and_says_why(monkeypatch):
    """A compiler that is there but cannot build (cpp_extension raises RuntimeError) is no reason
    to lose the port: it runs in-process, and its description names the failure."""

    def failed_build():
        raise RuntimeError("Error building extension 'x_0'\nninja: build stopped")

    monkeypatch.setattr(get_backend("libtorch"), "preload", failed_build)
    model = load_model(_spec("small_cnn"))
    port = build_port("torchscript", model, example_inputs("small_cnn"))
    assert port.description == (
        "TorchScript in-process (the LibTorch build failed: RuntimeError: Error building extension 'x_0')"
    )
    handles = _count_cpp_forwards(monkeypatch)
    calls, _ = record(model, example_inputs("small_cnn"))
    assert port.isolated(port.units(calls)[0], calls[0].inputs).shape == tuple(calls[0].output.shape)
    assert handles == []


def test_each_port_is_freed_before_the_next_is_built_and_the_heap_thawed_after(monkeypatch):
    """One port held at a time, its reference cycles collected after it ran; what existed before
    the ports is frozen out of those collections for their time only, Ctrl-C included."""
    from accuracy.workflows.model import sweep

    built, frozen = [], []
    real = sweep.PortJob.build_or_why

    def build_or_why(self, *args):
        assert all(previous() is None for previous in built)  # freed before the next is built
        frozen.append(gc.get_freeze_count())
        port = real(self, *args)
        port.cycle = port  # only the collection frees it
        built.append(weakref.ref(port))
        return port

    monkeypatch.setattr(sweep.PortJob, "build_or_why", build_or_why)
    report = run_model(ModelRun(_spec("small_cnn"), "x=2x3x8x8", ["threads:1", "onnxruntime-noopt"]))
    assert [p.flagged for p in report.ports] == [0, 0] and len(built) == 2
    assert min(frozen) > 100_000 and gc.get_freeze_count() == 0  # the frameworks' objects, then none

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_port", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_model(ModelRun(_spec("small_cnn"), "x=2x3x8x8", ["threads:1"]))
    assert gc.get_freeze_count() == 0
