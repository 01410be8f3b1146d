"""Decoders through the ONNX ports and the activations file (issue "Models as users bring them",
items 7, 8 and 3): transformers' GPT-2 and Llama export (the dynamo exporter where TorchScript's
fails), their blocks, attentions and MLPs are judged as units as well as their leaves, and a
multi-output module's further outputs travel in the activations file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from chromium import chromium, needs_chromium

from accuracy.workflows.array_files import read_arrays, write_arrays
from accuracy.workflows.model.sweep import run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.zoo import example_inputs, gpt2_tiny, llama_tiny

ZOO = "accuracy.workflows.model.zoo:"


def _inputs(tmp_path, name: str) -> str:
    return str(write_arrays(tmp_path / f"{name}.npz", example_inputs(name)))


@pytest.mark.slow  # transformers' GPT-2, exported and run twice
def test_onnx_ports_judge_gpt2_blocks_and_a_correct_export_flags_nothing(tmp_path):
    report = run_model(ZOO + "gpt2_tiny", _inputs(tmp_path, "gpt2_tiny"), ["onnxruntime", "onnxruntime-noopt"])
    assert report.absent == [] and report.within_rounding
    for port in report.ports:
        rows = {r["path"]: r for r in port["layers"]}
        assert port["flagged"] == 0 and port["compared"] == 27, port["port"]
        for parent in ("h.0", "h.0.attn", "h.0.mlp", "h.1"):  # parents judged from their ONNX nodes
            assert rows[parent]["verdict"] == "within rounding" and rows[parent]["tier"] == "typical tier of check --fn"
        # the position embedding of constant positions is folded at export: listed, with why
        assert rows["wpe"]["verdict"] == "not compared" and "constant at export" in rows["wpe"]["reason"]


def test_a_modules_further_outputs_are_saved_and_read_back(tmp_path):
    """Llama's rotary embedding gives (cos, sin): sin is `rotary_emb/out1`. PyTorch's own saved
    activations, read back as a runtime's, flag nothing (the file was rejected before: a key that
    names no layer)."""
    inputs = _inputs(tmp_path, "llama_tiny")
    saved = tmp_path / "llama.safetensors"
    run_model(ZOO + "llama_tiny", inputs, ["threads:1"], save_path=saved)
    arrays = read_arrays(saved)
    calls, _ = record(llama_tiny(), example_inputs("llama_tiny"))
    (rotary,) = [c for c in calls if c.path == "rotary_emb"]
    args, kwargs = rotary.template.filled(rotary.inputs)
    cos, sin = rotary.module(*args, **kwargs)
    assert np.array_equal(arrays["rotary_emb"], cos.numpy()) and np.array_equal(arrays["rotary_emb/out1"], sin.numpy())
    assert not any("/out" in k for k in arrays if not k.startswith("rotary_emb"))  # single-output modules: none
    report = run_model(ZOO + "llama_tiny", inputs, activations_files={"mine": str(saved)})
    (port,) = report.ports
    assert report.within_rounding and port["flagged"] == 0 and port["compared"] == 29 and port["not_compared"] == 0


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

    report = run_model(ZOO + "decoder", "x=1x8x32", ["threads:1"])
    page = tmp_path / "model.html"
    page.write_text(model_page(report.as_dict(), report.answers()) + PROBE)
    dom = chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    lefts = dict(item.split("=") for item in dom.split('<output id="probe">')[1].split("</output>")[0].split(","))
    left = {path: int(x) for path, x in lefts.items()}
    assert left["layers.0"] == left["layers.1"] == left["norm"]
    assert left["layers.0"] < left["layers.0.self_attn"] == left["layers.0.mlp"] < left["layers.0.self_attn.q_proj"]
    assert left["layers.0.self_attn.q_proj"] == left["layers.1.mlp.down_proj"]
