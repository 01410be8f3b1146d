"""The common transformer port bugs live between leaf layers, in a parent's forward: each is
named at the innermost module holding it, and correct ports by other routes flag nothing.

The reference is accuracy.workflows.model.zoo's `decoder` (a Llama-style decoder written out);
each port is that decoder with one bug, run in PyTorch, its activations handed over as a
runtime would (every module's output and inputs, parents included). On aae7010 only leaves were
units: every one of these bugs read "every compared layer within rounding"."""

from __future__ import annotations

import pytest
import torch

from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.rows import PortResult
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.zoo import decoder, example_inputs

DECODER = "accuracy.workflows.model.zoo:decoder"


def _judged_port(tmp_path, **bug) -> PortResult:
    inputs = example_inputs("decoder")
    calls, out = record(decoder(**bug), inputs)
    port = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
    x = write_arrays(tmp_path / "x.npz", inputs)
    (judged,) = run_model(ModelRun(DECODER, x, activations_files={"port": str(port)})).ports
    return judged


@pytest.mark.sweep  # one whole-model run per case: the first in `make test-fast`, all in `make test`
@pytest.mark.parametrize(
    ("bug", "module", "own_code"),
    [
        ({"scale_by_width": True}, "layers.0.self_attn", True),
        ({"causal": False}, "layers.0.self_attn", True),
        ({"interleaved": True}, "layers.0.self_attn", True),
        ({"softmax_dtype": torch.bfloat16}, "layers.0.self_attn", True),
        ({"eps": 1e-6}, "layers.0.input_layernorm", False),
    ],
    ids=["attention-scale", "no-causal-mask", "interleaved-rotary", "bfloat16-softmax", "rmsnorm-eps"],
)
def test_each_bug_is_named_at_the_innermost_module_holding_it(tmp_path, bug, module, own_code):
    port = _judged_port(tmp_path, **bug)
    assert port.first_not_within == module, [(r.path, r.verdict) for r in port.layers if r.verdict != WITHIN]
    row = next(r for r in port.layers if r.path == module)
    assert row.own_code is own_code
    inside = [r for r in port.layers if r.parent == module]
    assert all(r.verdict == WITHIN for r in inside)  # its submodules (q/k/v/o) are right
    assert port.end_to_end.verdict != WITHIN or port.flagged > 0


@pytest.mark.parametrize(
    "route", [{"sdpa": True}, {"by_division": True}], ids=["sdpa-for-explicit-softmax", "rmsnorm-by-division"]
)
def test_correct_ports_by_other_routes_flag_nothing(tmp_path, route):
    port = _judged_port(tmp_path, **route)
    assert port.flagged == 0, [(r.path, r.reason) for r in port.layers if r.verdict != WITHIN]
    assert port.end_to_end.verdict == WITHIN and port.compared == 27


def test_the_answer_says_the_difference_is_in_the_parents_own_forward(tmp_path, capsys):
    from accuracy.workflows.model.report import ModelReport

    port = _judged_port(tmp_path, scale_by_width=True)
    report = ModelReport("decoder", "eval", {}, [port])
    _, where, _ = report.answers()
    assert where.startswith("  first not within rounding: layers.0.self_attn (DecoderAttention), in its own forward: ")
    assert report.derivations()[0].startswith(
        "port [float32]: first not within rounding: layers.0.self_attn (DecoderAttention): the difference is in its "
        "own forward, outside its submodules (each within rounding): "
    )


def test_one_thread_against_itself_flags_nothing_in_any_module(two_torch_threads):
    report = run_model(ModelRun(DECODER, "x=1x8x32", ["threads:1"]))
    (port,) = report.ports
    assert port.flagged == 0 and port.compared == 27 and report.within_rounding
    assert {r.depth for r in port.layers} == {0, 1, 2}  # layers.0 -> self_attn -> q_proj
