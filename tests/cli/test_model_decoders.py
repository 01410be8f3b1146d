"""Decoders through the ONNX ports, ONNX files made elsewhere and the activations file (issue
"Models as users bring them", items 7, 8 and 3): transformers' GPT-2 and Llama export (the dynamo
exporter where TorchScript's fails), their blocks, attentions and MLPs are judged as units as well
as their leaves; `--onnx` judges an ORT-optimized export with its fused nodes as units; a
multi-output module's further outputs travel in the activations file; the page nests units."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from chromium import chromium, needs_chromium
from cli_runner import run_main

from accuracy.workflows.array_files import read_arrays, write_arrays
from accuracy.workflows.model.rows import UnitRow
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.zoo import example_inputs, gpt2_tiny, llama_tiny

ZOO = "accuracy.workflows.model.zoo:"


def _inputs(tmp_path, name: str) -> str:
    return str(write_arrays(tmp_path / f"{name}.npz", example_inputs(name)))


@pytest.mark.slow  # transformers' GPT-2, exported and run twice
def test_onnx_ports_judge_gpt2_blocks_and_a_correct_export_flags_nothing(tmp_path):
    report = run_model(
        ModelRun(ZOO + "gpt2_tiny", _inputs(tmp_path, "gpt2_tiny"), ["onnxruntime", "onnxruntime-noopt"])
    )
    assert report.absent == [] and report.within_rounding
    for port in report.ports:
        rows = {r.path: r for r in port.layers}
        assert port.flagged == 0 and port.compared == 27, port.port
        for parent in ("h.0", "h.0.attn", "h.0.mlp", "h.1"):  # parents judged from their ONNX nodes
            assert rows[parent].verdict == "within rounding" and rows[parent].tier == "typical tier of check --fn"
        # the position embedding of constant positions is folded at export: listed, with why
        assert rows["wpe"].verdict == "not compared" and "constant at export" in rows["wpe"].reason


def test_a_modules_further_outputs_are_saved_and_read_back(tmp_path):
    """Llama's rotary embedding gives (cos, sin): sin is `rotary_emb/out1`. PyTorch's own saved
    activations, read back as a runtime's, flag nothing (the file was rejected before: a key that
    names no layer)."""
    inputs = _inputs(tmp_path, "llama_tiny")
    saved = tmp_path / "llama.safetensors"
    run_model(ModelRun(ZOO + "llama_tiny", inputs, ["threads:1"], save_path=saved))
    arrays = read_arrays(saved)
    calls, _ = record(llama_tiny(), example_inputs("llama_tiny"))
    (rotary,) = [c for c in calls if c.path == "rotary_emb"]
    args, kwargs = rotary.template.filled(rotary.inputs)
    cos, sin = rotary.module(*args, **kwargs)
    assert np.array_equal(arrays["rotary_emb"], cos.numpy()) and np.array_equal(arrays["rotary_emb/out1"], sin.numpy())
    assert not any("/out" in k for k in arrays if not k.startswith("rotary_emb"))  # single-output modules: none
    report = run_model(ModelRun(ZOO + "llama_tiny", inputs, activations_files={"mine": str(saved)}))
    (port,) = report.ports
    assert report.within_rounding and port.flagged == 0 and port.compared == 29 and port.not_compared == 0


def test_a_further_output_of_the_wrong_shape_is_bad_input(tmp_path):
    from accuracy.core.errors import OpbenchError
    from accuracy.workflows.model.activations_file import activations, read_activations

    calls, out = record(gpt2_tiny(), example_inputs("gpt2_tiny"))
    calls[0].more_outputs = [torch.zeros(2, 3)]  # as if the first module gave two tensors
    arrays = activations(calls, out)
    key = calls[0].key + "/out1"
    path = write_arrays(tmp_path / "a.npz", arrays | {key: np.zeros((3, 3), np.float32)})
    with pytest.raises(OpbenchError, match=f"'{key}' has shape \\(3, 3\\), the model's has \\(2, 3\\)"):
        read_activations(path, calls)
    assert set(read_activations(write_arrays(tmp_path / "b.npz", arrays), calls)) == set(arrays)


PROBE = """<script>window.addEventListener("load", () => {
  const lefts = [...document.querySelectorAll("tr")].slice(1).map(row => {
    const range = document.createRange();
    range.selectNodeContents(row.cells[0]);
    return row.cells[0].textContent + "=" + Math.round(range.getBoundingClientRect().left);
  });
  const out = document.createElement("output");
  out.id = "probe";
  out.textContent = lefts.join(",");
  document.body.append(out);
});</script>"""


@needs_chromium
@pytest.mark.slow  # end to end: Chromium
def test_the_model_page_indents_nested_units_under_their_parent(tmp_path):
    """As a browser lays it out: a block's attention right of the block, its projections further right."""
    from accuracy.report.model_page import model_page

    report = run_model(ModelRun(ZOO + "decoder", "x=1x8x32", ["threads:1"]))
    page = tmp_path / "model.html"
    page.write_text(model_page(report) + PROBE)
    dom = chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    lefts = dict(item.split("=") for item in dom.split('<output id="probe">')[1].split("</output>")[0].split(","))
    left = {path: int(x) for path, x in lefts.items()}
    assert left["layers.0"] == left["layers.1"] == left["norm"]
    assert left["layers.0"] < left["layers.0.self_attn"] == left["layers.0.mlp"] < left["layers.0.self_attn.q_proj"]
    assert left["layers.0.self_attn.q_proj"] == left["layers.1.mlp.down_proj"]


# --- --onnx LABEL=FILE: a model exported and optimized elsewhere --------------------------------


def _optimized(tmp_path, name: str, exported, model_type: str, heads: int, hidden: int) -> Path:
    """`exported` saved, then optimized as users do for ONNX Runtime (its transformer fusions)."""
    import onnx
    from onnxruntime.transformers import optimizer

    plain = tmp_path / f"{name}.onnx"
    onnx.save(exported, plain)
    with contextlib.redirect_stdout(io.StringIO()):
        fused = optimizer.optimize_model(str(plain), model_type=model_type, num_heads=heads, hidden_size=hidden)
    path = tmp_path / f"{name}_optimized.onnx"
    fused.save_model_to_file(str(path))
    return path


def _edited(path: Path, node_kind: str, index: int, epsilon: float) -> Path:
    """A copy of the file with the `index`-th `node_kind` node's epsilon changed (a port bug)."""
    import onnx

    model = onnx.load(path)
    node = [n for n in model.graph.node if n.op_type == node_kind][index]
    (attribute,) = [a for a in node.attribute if a.name == "epsilon"]
    attribute.f = epsilon
    broken = path.with_name(f"broken_{path.name}")
    onnx.save(model, broken)
    return broken


def _rows(report) -> dict[str, UnitRow]:
    (port,) = report.ports
    return {r.path: r for r in port.layers}


def _flagged(report) -> set[str]:
    return {p for p, r in _rows(report).items() if r.verdict not in ("within rounding", "not compared")}


@pytest.fixture(scope="module")
def bert_optimized(tmp_path_factory):
    from accuracy.workflows.model.onnx_graph import export
    from accuracy.workflows.model.zoo import bert2

    tmp = tmp_path_factory.mktemp("bert")
    exported = export(bert2().eval(), example_inputs("bert2"))  # the TorchScript exporter takes BERT
    return tmp, _optimized(tmp, "bert2", exported, "bert", 4, 64)


@pytest.mark.slow  # exports and optimizes BERT, two runs
def test_an_ort_optimized_bert_is_judged_with_its_fused_nodes_as_units(bert_optimized):
    import onnx

    tmp, path = bert_optimized
    kinds = {n.op_type for n in onnx.load(path).graph.node}
    assert {"SkipLayerNormalization", "Gelu", "Gemm"} <= kinds  # what the optimizer fused
    inputs = _inputs(tmp, "bert2")
    report = run_model(ModelRun(ZOO + "bert2", inputs, [], onnx_files={"ort": (str(path), None)}))
    rows = _rows(report)
    # SkipLayerNormalization (the dense's bias, the residual add, the LayerNorm) after a Linear of
    # its own: judged as the sublayer holding them
    assert rows["encoder.layer.0.attention.output"].verdict == "within rounding"
    assert "fused with the code around it" in rows["encoder.layer.0.attention.output.LayerNorm"].reason
    assert rows["encoder.layer.0.attention.output.dense"].verdict == "not compared"
    # ... and after a value the file keeps: the LayerNorm judged, fed the reference's own values
    assert rows["encoder.layer.0.output.LayerNorm"].verdict == "within rounding"
    assert rows["encoder.layer.0.output.dense"].covers == [
        "encoder.layer.0.output.dense",
        "encoder.layer.0.output.dropout",
    ]
    assert rows["encoder.layer.0.intermediate.intermediate_act_fn"].verdict == "within rounding"  # Gelu
    # a correct export flags nothing, BertEmbeddings (a parent of integer inputs only) included
    assert _flagged(report) == set() and rows["embeddings"].verdict == "within rounding"
    assert report.ports[0].compared == 33

    broken = _edited(path, "SkipLayerNormalization", 0, 1e-3)  # BERT's LayerNorm eps is 1e-12
    flagged = _flagged(run_model(ModelRun(ZOO + "bert2", inputs, [], onnx_files={"ort": (str(broken), None)})))
    innermost = {p for p in flagged - {"embeddings"} if not any(q.startswith(p + ".") for q in flagged)}
    assert innermost == {"encoder.layer.0.attention.output"}


# The optimized Llama is exported once per `make test`: the tests that read it share an xdist
# group, and it outlives xdist's teardown of module fixtures when a worker's queue runs dry
LLAMA_GROUP = pytest.mark.xdist_group("ort-optimized-llama")


@pytest.fixture(scope="module")
def llama_optimized(tmp_path_factory):
    return _llama_optimized(tmp_path_factory.getbasetemp())


@functools.cache
def _llama_optimized(base: Path) -> tuple[Path, Path]:
    tmp = base / "llama_optimized"
    tmp.mkdir()
    kwargs = {k: torch.as_tensor(v) for k, v in example_inputs("llama_tiny").items()}
    with contextlib.redirect_stdout(io.StringIO()):  # the dynamo exporter as users call it (optimize=True)
        program = torch.onnx.export(llama_tiny(), (), kwargs=kwargs | {"use_cache": False}, dynamo=True)
    return tmp, _optimized(tmp, "llama", program.model_proto, "gpt2", 4, 32)


@pytest.mark.slow  # exports and optimizes Llama, two runs
@LLAMA_GROUP
def test_an_ort_optimized_llama_flags_nothing_and_a_broken_norm_is_named(llama_optimized):
    import onnx

    tmp, path = llama_optimized
    kinds = [n.op_type for n in onnx.load(path).graph.node]
    assert kinds.count("SkipSimplifiedLayerNormalization") == 4 and "SimplifiedLayerNormalization" in kinds
    inputs = _inputs(tmp, "llama_tiny")
    report = run_model(ModelRun(ZOO + "llama_tiny", inputs, [], onnx_files={"ort": (str(path), None)}))
    rows = _rows(report)
    assert report.within_rounding and _flagged(report) == set() and report.ports[0].compared == 27
    # a norm fused with the residual add before it is still judged, fed the reference's own values
    for norm in ("layers.0.post_attention_layernorm", "layers.1.input_layernorm", "norm"):
        assert rows[norm].verdict == "within rounding", norm
    assert rows["layers.0.self_attn"].verdict == "within rounding"
    assert "fused with the code after it" in rows["layers.1"].reason  # its output never exists as a value

    broken = _edited(path, "SkipSimplifiedLayerNormalization", 0, 1e-2)  # Llama's eps is 1e-6
    flagged = _flagged(run_model(ModelRun(ZOO + "llama_tiny", inputs, [], onnx_files={"ort": (str(broken), None)})))
    innermost = {p for p in flagged if not any(q.startswith(p + ".") for q in flagged)}
    assert innermost == {"layers.0.post_attention_layernorm"}


@pytest.mark.slow  # exports Llama
@LLAMA_GROUP
def test_a_mapping_file_pairs_values_the_exporters_names_miss(llama_optimized, tmp_path):
    import onnx

    _, path = llama_optimized
    model = onnx.load(path)
    (node,) = [n for n in model.graph.node if n.op_type == "SimplifiedLayerNormalization"]
    old = node.output[0]
    for n in model.graph.node:  # the value renamed, as another tool might
        n.input[:] = ["renamed_norm" if i == old else i for i in n.input]
    node.output[0] = "renamed_norm"
    renamed = tmp_path / "renamed.onnx"
    onnx.save(model, renamed)
    inputs = _inputs(tmp_path, "llama_tiny")
    alone = _rows(run_model(ModelRun(ZOO + "llama_tiny", inputs, [], onnx_files={"ort": (str(renamed), None)})))
    assert alone["layers.0.input_layernorm"].verdict == "not compared"
    mapping = tmp_path / "names.json"
    mapping.write_text(json.dumps({"renamed_norm": "layers.0.input_layernorm"}))
    paired = _rows(
        run_model(ModelRun(ZOO + "llama_tiny", inputs, [], onnx_files={"ort": (str(renamed), str(mapping))}))
    )
    assert paired["layers.0.input_layernorm"].verdict == "within rounding"


@pytest.mark.slow  # builds BERT to check against
def test_bad_onnx_files_are_one_line(bert_optimized, tmp_path, capsys):
    import onnx

    _, path = bert_optimized
    inputs = _inputs(tmp_path, "bert2")
    (tmp_path / "link.onnx").symlink_to(path)
    (tmp_path / "folder.onnx").mkdir()
    (tmp_path / "text.onnx").write_text("not a model")
    (tmp_path / "map.json").write_text("[1, 2]")
    model = onnx.load(path)  # a graph that takes another input than the model
    model.graph.input[0].name = "ids"
    for node in model.graph.node:
        node.input[:] = ["ids" if i == "input_ids" else i for i in node.input]
    onnx.save(model, tmp_path / "other_input.onnx")
    cases = {
        ("--onnx", "ort=" + str(tmp_path / "link.onnx")): "a symbolic link",
        ("--onnx", "ort=" + str(tmp_path / "folder.onnx")): "a directory, not a file",
        ("--onnx", "ort=" + str(tmp_path / "text.onnx")): "not an ONNX model",
        ("--onnx", "ort=" + str(tmp_path / "missing.onnx")): "no such file",
        ("--onnx", "ort"): "expected LABEL=FILE",
        ("--onnx", f"ort={path}", "--onnx-map", "ort=" + str(tmp_path / "map.json")): "expected a JSON object",
        ("--onnx", f"ort={path}", "--onnx-map", "other=" + str(tmp_path / "map.json")): "no --onnx other=FILE",
    }
    for args, words in cases.items():
        status, _, err = run_main(capsys, "model", ZOO + "bert2", "--inputs", inputs, *args)
        assert status == 2 and words in err and err.count("\n") == 1, (args, err)
    (tmp_path / "nowhere.json").write_text(json.dumps({"no_such_value": "encoder.layer.0"}))
    nowhere = ("--onnx", f"ort={path}", "--onnx-map", "ort=" + str(tmp_path / "nowhere.json"))
    status, _, err = run_main(capsys, "model", ZOO + "bert2", "--inputs", inputs, *nowhere)
    assert status == 2 and "'no_such_value' names no value of the ONNX graph" in err and err.count("\n") == 1
    other = "ort=" + str(tmp_path / "other_input.onnx")
    status, _, err = run_main(capsys, "model", ZOO + "bert2", "--inputs", inputs, "--onnx", other)
    assert status == 2 and "the ONNX graph takes ids, which the model's inputs lack" in err and err.count("\n") == 1
