"""A model's conversions through the cache (issue 41, "do each thing once"): the two ONNX Runtime
ports of one run export the model once and a rerun not at all, with the report of an export made
afresh; a changed weight, forward, patched torch function or input exports again, and so does a
model in training mode, whose statistics the key's forward must not move. An ExecuTorch rerun
lowers no unit again, and OPBENCH_CONVERSION_CACHE keeps conversions apart from references."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from accuracy.core.errors import OpbenchError
from accuracy.reference import cache as refcache
from accuracy.workflows.model import export_cache, onnx_graph
from accuracy.workflows.model.export_cache import cached_export, export_key
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.zoo import example_inputs, small_cnn

SMALL_CNN = "accuracy.workflows.model.zoo:small_cnn"


@pytest.fixture
def exports(monkeypatch) -> list:
    """Every call of torch.onnx.export, as it happens."""
    calls: list = []
    real = torch.onnx.export

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", counted)
    return calls


def _report(ports: list[str]) -> str:
    def timeless(value):
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if k != "seconds"}
        return [timeless(v) for v in value] if isinstance(value, list) else value

    return json.dumps(timeless(run_model(ModelRun(SMALL_CNN, "x=2x3x8x8", ports)).as_dict()["ports"]), sort_keys=True)


def test_the_two_onnxruntime_ports_of_a_run_export_once_and_a_rerun_not_at_all(cache_path, monkeypatch, exports):
    warm = _report(["onnxruntime", "onnxruntime-noopt"])
    assert len(exports) == 1
    assert _report(["onnxruntime", "onnxruntime-noopt"]) == warm and len(exports) == 1
    monkeypatch.setenv("OPBENCH_CACHE", str(cache_path.parent / "empty"))
    assert _report(["onnxruntime", "onnxruntime-noopt"]) == warm and len(exports) == 2


def test_the_graph_read_back_is_the_bytes_exported(cache_path, exports):
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    stored = cached_export(onnx_graph.export, model, inputs).SerializeToString()
    read = cached_export(onnx_graph.export, model, inputs).SerializeToString()
    assert len(exports) == 1 and read == stored == onnx_graph.export(model, inputs).SerializeToString()


def _weight(model, inputs, monkeypatch):
    with torch.no_grad():
        model.fc.weight[0, 0] += 2.0**-10


def _forward(model, inputs, monkeypatch):
    """The same modules, its second convolution skipped: only the class's code shows it."""
    monkeypatch.setattr(
        type(model), "forward", lambda self, x: self.fc(self.flatten(self.relu(self.bn1(self.conv1(x)))))
    )


def _torch_function(model, inputs, monkeypatch):
    """A helper the forward calls, patched in this process: no attribute of the model shows it."""
    relu = torch.nn.functional.relu
    monkeypatch.setattr(torch.nn.functional, "relu", lambda x, inplace=False: relu(x) * 0.5)


def _input(model, inputs, monkeypatch):
    inputs["x"] = np.nextafter(inputs["x"], np.float32(np.inf))


@pytest.mark.parametrize("change", [_weight, _forward, _torch_function, _input])
def test_a_changed_model_forward_or_input_exports_again(cache_path, monkeypatch, exports, change):
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    before = cached_export(onnx_graph.export, model, inputs).SerializeToString()
    change(model, inputs, monkeypatch)
    after = cached_export(onnx_graph.export, model, inputs).SerializeToString()
    assert len(exports) == 2 and after == onnx_graph.export(model, inputs).SerializeToString()
    if change is not _input:  # the same graph on other inputs: the weights' bytes are the graph's
        assert after != before


def test_a_model_in_training_mode_is_exported_each_time_and_its_statistics_stay(cache_path, exports):
    model, inputs = small_cnn().train(), example_inputs("small_cnn")
    statistics = model.bn1.running_mean.clone()
    assert export_key(onnx_graph.export, model, inputs) is None
    cached_export(onnx_graph.export, model.eval(), inputs)
    model.train()
    cached_export(onnx_graph.export, model, inputs)
    cached_export(onnx_graph.export, model, inputs)
    assert len(exports) == 3 and torch.equal(model.bn1.running_mean, statistics)


def test_a_model_larger_than_the_limit_is_not_kept(cache_path, monkeypatch, exports):
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    size = sum(p.numel() * p.element_size() for p in (*model.parameters(), *model.buffers()))
    monkeypatch.setattr(export_cache, "LIMIT_BYTES", size - 1)
    assert export_key(onnx_graph.export, model, inputs) is None
    cached_export(onnx_graph.export, model, inputs)
    cached_export(onnx_graph.export, model, inputs)
    assert len(exports) == 2 and not cache_path.exists()


def test_a_graph_exposes_its_values_in_place_and_is_left_as_it_was():
    """The probe of every value and the end-to-end run with each unit's output expose them on the
    graph itself, not on a copy of its weights: the values are a copy's, and the graph's bytes after
    are its bytes before, even where the run fails."""
    graph = onnx_graph.Graph.of(onnx_graph.export(small_cnn(), example_inputs("small_cnn")))
    before = graph.model.SerializeToString()
    feeds = {graph.model.graph.input[0].name: example_inputs("small_cnn")["x"]}
    values = graph.probe(feeds)
    names = [n for n in values if n not in feeds][:3]
    copy = graph.with_outputs(names, {n: values[n].dtype for n in names})
    from_copy = onnx_graph.run(onnx_graph.session(copy, True), feeds)
    with graph.exposing(names, {n: values[n].dtype for n in names}) as exposed:
        in_place = onnx_graph.run(onnx_graph.session(exposed, True), feeds)
    assert from_copy.keys() == in_place.keys() and all(np.array_equal(from_copy[k], in_place[k]) for k in in_place)
    assert graph.model.SerializeToString() == before
    with pytest.raises(RuntimeError), graph.exposing(names):
        raise RuntimeError("the session failed")
    assert graph.model.SerializeToString() == before


@pytest.fixture
def lowerings(monkeypatch) -> list:
    """Every ExecuTorch lowering of a unit or of the model (not the end-to-end run's, with its
    ETRecord), as it happens."""
    from accuracy.workflows.model.ports.executorch_port import ExecuTorchPort

    calls: list = []
    real = ExecuTorchPort._lowered

    def counted(self, module, example, etrecord=False):
        if not etrecord:
            calls.append((self.delegate, type(module).__name__))
        return real(self, module, example, etrecord)

    monkeypatch.setattr(ExecuTorchPort, "_lowered", counted)
    return calls


def test_an_executorch_rerun_lowers_nothing_again_and_reports_the_same(cache_path, lowerings):
    """Both kernels' ports, then again: the second run loads each program (the units lowered as
    one) from the cache, and the report is the first one's. Each kernel's program is its own (the
    key holds `delegate`)."""
    first = _report(["executorch", "executorch-portable"])
    assert sorted(lowerings) == [(False, "Parts"), (True, "Parts")]
    assert _report(["executorch", "executorch-portable"]) == first and len(lowerings) == 2
    assert '"executorch-portable"' in first and '"flagged": 0' in first


def test_an_executorch_program_read_back_is_the_bytes_lowered_and_a_changed_weight_lowers_again(cache_path, lowerings):
    from accuracy.workflows.model.ports.executorch_port import ExecuTorchPort

    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    port = ExecuTorchPort("executorch-portable", model, inputs, delegate=False)
    example = (torch.from_numpy(inputs["x"]),)

    def program() -> bytes:
        return export_cache.cached_program(
            lambda: port._lowered(model, example).buffer, "delegate=False", (export_cache,), model, example
        )

    stored, read = program(), program()
    assert len(lowerings) == 1 and stored == read == port._lowered(model, example).buffer
    _weight(model, inputs, None)
    program()
    assert len(lowerings) == 3


def test_conversions_go_where_opbench_conversion_cache_says_and_else_beside_the_references(
    tmp_path, monkeypatch, exports
):
    model, inputs = small_cnn().eval(), example_inputs("small_cnn")
    key = export_key(onnx_graph.export, model, inputs)
    references, conversions = tmp_path / "refs", tmp_path / "conversions"
    monkeypatch.setenv("OPBENCH_CACHE", str(references))
    monkeypatch.setenv("OPBENCH_CONVERSION_CACHE", str(conversions))
    cached_export(onnx_graph.export, model, inputs)
    assert [p.name for p in conversions.iterdir()] == [f"{key}.npz"] and not references.exists()
    monkeypatch.delenv("OPBENCH_CONVERSION_CACHE")
    cached_export(onnx_graph.export, model, inputs)
    assert [p.name for p in references.iterdir()] == [f"{key}.npz"] and len(exports) == 2
    # a conversion cache others can write to is refused by its name, as the reference cache is
    monkeypatch.setenv("OPBENCH_CONVERSION_CACHE", str(conversions))
    conversions.chmod(0o777)
    with pytest.raises(OpbenchError, match=r"the conversion cache \(OPBENCH_CONVERSION_CACHE\) .* writable by others"):
        refcache.cache_dir(refcache.CONVERSIONS)
