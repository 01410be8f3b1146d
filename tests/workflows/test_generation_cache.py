"""A port decoding with transformers' DynamicCache, judged step by step against the float64 full
recompute: a correct one flags nothing, and each cache bug (position ids off by one, the cache not
appended, rotary at the wrong position, a mask built for the wrong length) is named from the
end-to-end comparison, on transformers' Llama (tiny config). Before, `opbench model` ran every
forward with `use_cache=False`: a cache was never judged."""

from __future__ import annotations

import pytest

from accuracy.workflows.model.decoders import llama
from accuracy.workflows.model.generation import judge_ports, prompt_ids, reference_text
from accuracy.workflows.model.generation_cache import CACHE_BUGS
from accuracy.workflows.model.generation_ports import ONNX_CACHE, cache_port, onnx_cache_port

STEPS = 6
# each module fixture's tests on one worker, so that it is computed once per `make test`: spread
# over the workers, the ONNX one was computed on three (25-32 s each) and the other on two
ON_JUDGED = pytest.mark.xdist_group("generation-cache")
ON_JUDGED_ONNX = pytest.mark.xdist_group("generation-cache-onnx")


def _judged(build, bugs: list[str]) -> dict[str, dict]:
    """The correct cached port `build(model)` and one per bug `build(model, bug)`, judged, by name."""
    model = llama()
    text, _ = reference_text(model, prompt_ids("5,17,42,8"), STEPS)
    ports = [build(model)] + [build(model, bug) for bug in bugs]
    runs = [(port, port.step_logits(text, 4, STEPS)) for port in ports]
    results = judge_ports("accuracy.workflows.model.decoders:llama", model, text, 4, runs, sweep=False)
    return {r["port"]: r for r in results}


@pytest.fixture(scope="module")
def judged():
    return _judged(cache_port, list(CACHE_BUGS))


@ON_JUDGED
def test_a_correct_cached_port_flags_nothing(judged):
    port = judged["cache"]
    assert (port["compared"], port["flagged"], port["flips"], port["end_to_end_cause"]) == (STEPS, 0, 0, None)
    assert 0 < port["worst_ratio"] < 1


@ON_JUDGED
@pytest.mark.parametrize("bug", list(CACHE_BUGS))
def test_each_cache_bug_is_named(judged, bug):
    port = judged[f"cache ({bug})"]
    # the prefill is the full recompute's: the bug shows from the first step fed through the cache
    assert port["steps"][0]["verdict"] == "within rounding"
    assert port["first_beyond"] == (2 if bug == "cache not appended" else 1)
    assert port["flagged"] == STEPS - port["first_beyond"]
    cause = port["end_to_end_cause"]
    assert cause["name"] == bug and cause["explains"] and cause["ratio"] <= 1


ORT_BUGS = list(CACHE_BUGS)  # the mask one key short: the runtime feeds its past without the first key


@pytest.fixture(scope="module")
def judged_onnx():
    return _judged(onnx_cache_port, ORT_BUGS)


@ON_JUDGED_ONNX
def test_onnx_runtime_decoding_with_past_key_values_flags_nothing(judged_onnx):
    """The dynamo exporter's graph with past key/values as inputs and outputs, prefilled on an
    empty cache and fed one token a step: within rounding of the float64 full recompute at each."""
    port = judged_onnx[ONNX_CACHE]
    assert (port["compared"], port["flagged"], port["flips"], port["end_to_end_cause"]) == (STEPS, 0, 0, None)
    assert port["dtype"] == "float32" and 0 < port["worst_ratio"] < 1


@ON_JUDGED_ONNX
@pytest.mark.parametrize("bug", ORT_BUGS)
def test_each_cache_bug_of_an_onnx_runtime_decode_is_named(judged_onnx, bug):
    port = judged_onnx[f"{ONNX_CACHE} ({bug})"]
    assert port["steps"][0]["verdict"] == "within rounding"  # the prefill
    assert port["first_beyond"] == (2 if bug == "cache not appended" else 1)
    cause = port["end_to_end_cause"]
    assert cause["name"] == bug and cause["explains"] and cause["ratio"] <= 1
