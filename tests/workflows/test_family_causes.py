"""The conventions where today's decoder families differ from Llama, as causes (causes/families.py):
each injected into transformers' own Gemma 2, Gemma 3, Qwen2, Qwen3, Mistral, Phi-3 and Llama 3
classes (tiny configs) is named right, with its parameter, and the correct float32 run gets none.
Before these entries a dropped soft-cap or tiled grouped-query heads got "nearest: the attention
scores 1 times the reference's", transformers' GELU classes no cause at all."""

from __future__ import annotations

import copy

import pytest
import torch

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.answer import cause_text
from accuracy.workflows.model.cause_selftest import RIGHT
from accuracy.workflows.model.causes import families
from accuracy.workflows.model.causes.families import ERF, TANH, gelu_kind, has_offset
from accuracy.workflows.model.decoders import base_model, llama
from accuracy.workflows.model.family_selftest import family_selftest
from accuracy.workflows.model.generation import prompt_ids, run_generate
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.torchvision_import import import_transformers
from accuracy.workflows.model.trace import record


@pytest.fixture(scope="module")
def measured():
    return family_selftest()


@pytest.mark.slow
@pytest.mark.xdist_group("family-selftest")
def test_each_convention_is_named_right_on_each_family_that_has_it(measured):
    rows = measured["rows"]
    wrong = [(r["model"], r["cause"], r["outcome"], r.get("named"), r.get("parameters")) for r in rows]
    assert measured["named_right_rate"] >= 0.95, [w for w in wrong if w[2] != RIGHT]
    assert measured["correct_flagged"] == []
    by = {(r["model"], r["cause"]): r for r in rows}
    assert abs(by[("transformers_llama3", "rope base")]["parameters"]["theta"] - 5e5) <= 5e4
    assert abs(by[("transformers_gemma2", "attention soft-cap")]["parameters"]["cap"] - 20.0) <= 2.0
    assert by[("transformers_gemma2", "attention scale before the soft-cap")]["outcome"] == RIGHT
    assert by[("transformers_llama3", "rope scaling ignored")]["outcome"] == RIGHT
    named_on = {m for (m, c), r in by.items() if c == "grouped-query heads tiled" and r["outcome"] == RIGHT}
    assert {"transformers_llama3", "transformers_qwen2", "transformers_mistral", "transformers_gemma2"} <= named_on
    assert ("transformers_phi3", "grouped-query heads tiled") not in by  # its q, k, v fused: another layout
    assert {m for (m, c) in by if c == "norm weight offset"} >= {"transformers_gemma2", "transformers_qwen3"}
    # Phi-3 rotating half of each head: a port rotating all of it; the others rotating half
    assert by[("transformers_phi3", "partial rotary")]["parameters"] == {"fraction": 1.0}
    assert by[("transformers_llama3", "partial rotary")]["parameters"] == {"fraction": 0.5}
    assert by[("transformers_gemma3", "embedding scale dropped")]["outcome"] == RIGHT
    assert by[("transformers_gemma3", "embedding scale format")]["parameters"] == {"format": "bfloat16"}
    for model in ("transformers_mistral", "transformers_gemma2"):  # a window of 4 keys on 8 tokens
        assert by[(model, "sliding window dropped")]["outcome"] == RIGHT
        assert by[(model, "sliding window off by one")]["parameters"] == {"window": 3}
        assert by[(model, "sliding window width")]["parameters"] == {"window": 1}


def test_transformers_gelu_classes_are_told_by_what_they_compute():
    activations = import_transformers().activations
    assert gelu_kind(activations.GELUActivation()) == ERF
    assert gelu_kind(activations.NewGELUActivation()) == TANH
    assert gelu_kind(activations.GELUTanh()) == TANH
    assert gelu_kind(activations.SiLUActivation()) is None
    assert gelu_kind(torch.nn.GELU()) is None  # the GELU entry's, by class


def test_gemmas_norm_is_told_from_llamas_by_what_it_computes():
    transformers = import_transformers()
    gemma = transformers.models.gemma2.modeling_gemma2.Gemma2RMSNorm(16)
    llama = transformers.models.llama.modeling_llama.LlamaRMSNorm(16)
    assert has_offset(gemma) and not has_offset(llama) and not has_offset(torch.nn.Linear(16, 16))


def test_the_nearest_entry_is_never_worded_as_a_cause():
    nearest = {"name": "attention scale", "words": "the attention scores 1 times the reference's", "ratio": 3.53}
    text = cause_text(nearest | {"explains": False, "parameters": {}, "alternatives": []})
    assert text.startswith("no known cause explains it: nothing in the catalogue does (the nearest entry tried, ")
    assert "attention scale" in text and "times the reference's" not in text


def _end_to_end_cause(hand_port: str) -> dict:
    """The end-to-end cause `generate` gives tiny Gemma 2's hand port `decoders:<hand_port>`, which
    is beyond rounding from the first step."""
    report = run_generate(
        "accuracy.workflows.model.decoders:gemma2",
        "5,17,42,8",
        2,
        [],
        {"port": f"accuracy.workflows.model.decoders:{hand_port}"},
        sweep=False,
    ).as_dict()
    (port,) = report["ports"]
    assert port["first_beyond"] == 0
    return port["end_to_end_cause"]


def test_a_dropped_final_soft_cap_gets_its_cause_from_the_end_to_end_comparison():
    """Gemma 2's tanh(z / 30) 30 on the logits is in the model's own forward: no layer holds it."""
    cause = _end_to_end_cause("no_final_softcap")
    assert cause["name"] == "final soft-cap dropped" and cause["explains"] and cause["ratio"] <= 1
    assert cause["words"] == "no final-logit soft-cap: the logits not capped at 30 (tanh(z/c) c)"


def test_an_lm_head_tied_to_the_embedding_where_the_model_unties_them_is_named(tmp_path):
    """Llama's lm_head is its own; a port tying it to the input embedding (a converter that assumes
    tie_word_embeddings) is named as its weight loaded from model.embed_tokens."""
    model, given = llama(), {"input_ids": prompt_ids("5,17,42,8,61,3,29,70")}
    assert not model.config.tie_word_embeddings
    port = copy.deepcopy(model)
    port.lm_head.weight = port.model.embed_tokens.weight
    path = write_arrays(tmp_path / "tied.safetensors", activations(*record(port, given)))
    report = run_model(ModelRun("accuracy.workflows.model.decoders:llama", dict(given), [], {"tied": str(path)}))
    (result,) = report.ports
    assert result.first_not_within == "lm_head"
    cause = next(r for r in result.layers if r.path == "lm_head").cause
    assert (cause.name, cause.parameters, cause.explains) == (
        "weight from another layer",
        {"layer": "model.embed_tokens"},
        True,
    )
    assert cause.words == "its weight loaded from model.embed_tokens"


def test_the_embedding_scale_and_its_format_are_told_on_gemma3():
    """Gemma 3's embedding multiplies by sqrt(hidden) itself; its normalizer in bfloat16 is 5.65625
    for sqrt(32) = 5.65685 (transformers PR #29402: 55.5 for sqrt(3072))."""
    embedding = base_model("transformers_gemma3").embed_tokens
    fmt = next(c for c in families.CAUSES if c.name == "embedding scale format")
    assert fmt.applies(embedding) and not fmt.applies(torch.nn.Embedding(4, 2))
    assert fmt.words(embedding, "bfloat16") == (
        "the embedding scale 5.65685 (sqrt(hidden)) computed in bfloat16: 5.65625"
    )


def test_gemma2s_normalizer_in_bfloat16_gets_its_cause_from_the_end_to_end_comparison():
    """Gemma 2 multiplies its embeddings by sqrt(hidden) in the model's own forward (no module holds
    it); a float32 port computing it in bfloat16 (5.65625 for sqrt(32) = 5.65685) is named there."""
    cause = _end_to_end_cause("normalizer_bfloat16")
    assert (cause["name"], cause["parameters"], cause["explains"]) == (
        "embedding scale format",
        {"format": "bfloat16"},
        True,
    )
    assert cause["ratio"] <= 1
    assert cause["words"] == "the embedding scale 5.65685 (sqrt(hidden)) computed in bfloat16: 5.65625"
