"""The self-test of causes (#42): every catalogue entry injected into a port of a small zoo model
is named right, with its fitted parameter within 10%, and the correct ports beside the mutants get
no cause. Rows come from `causes()`, so entries other packages add join without an edit here."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from accuracy.cli.main import main
from accuracy.cli.text.selftest import markdown_models, render_models
from accuracy.workflows.model.cause_selftest import (
    NOT_NAMED,
    RIGHT,
    WRONG,
    Injection,
    _outcome,
    model_selftest,
    model_summary,
)
from accuracy.workflows.model.causes import causes
from accuracy.workflows.model.unit import CauseFinding, NamedCause


# The self-test injects every catalogue entry into a port of a zoo model (minutes of CPU): slow, and
# the tests that read it on one worker, so that it runs once per `make test` (a module fixture runs
# on every worker that gets one of its tests: twice before, 146 s each under load).
@pytest.fixture(scope="module")
def measured():
    reports = list(model_selftest())
    return reports, model_summary(reports)


@pytest.mark.slow
@pytest.mark.xdist_group("cause-selftest")
def test_every_catalogue_entry_is_injected_and_named_right(measured):
    reports, total = measured
    rows = {i["cause"]: i for r in reports for i in r["injections"]}
    assert set(rows) == {c.name for c in causes()}
    wrong = {name: (i["outcome"], i["named"], i["why"]) for name, i in rows.items() if i["outcome"] != RIGHT}
    assert not wrong
    assert rows["normalization eps"]["path"] == "bn1" and rows["normalization eps"]["model"] == "small_cnn"
    assert abs(rows["normalization eps"]["parameters"]["eps"] - 1e-3) <= 1e-4
    assert rows["LeakyReLU slope"]["parameters"] == {"negative_slope": 0.2}
    assert rows["input scale"]["path"] == "the model's input"
    # a change of the output's shape: small_mixed's AvgPool2d(3, stride 2, padding 1) gives 5x5 for 4x4 on 8x8
    assert (rows["ceil_mode"]["model"], rows["ceil_mode"]["path"]) == ("small_mixed", "pool")
    assert all(i["seconds"] is not None and i["seconds"] > 0 for i in rows.values())
    assert total["named_right_rate"] == 1.0 and total["named_right"] == len(rows)


@pytest.mark.slow
@pytest.mark.xdist_group("cause-selftest")
def test_correct_ports_beside_the_mutants_get_no_cause(measured):
    reports, total = measured
    expected = {"llama_padded": ["threads:1"]}  # ONNX Runtime's padded rows are not torch's (cause_selftest)
    assert all(
        r["correct_ports"] == expected.get(r["model"], ["threads:1", "onnxruntime"]) for r in reports if r["model"]
    )
    assert total["named_on_correct"] == 0


def test_the_outcome_of_an_injection():
    (eps,) = [c for c in causes() if c.name == "normalization eps"]
    (float16,) = [c for c in causes() if c.name == "products in float16"]
    named = CauseFinding("normalization eps", "...", {"eps": 1.05e-3}, explains=True)
    assert _outcome(eps, named, 1e-3) == RIGHT
    assert _outcome(eps, replace(named, parameters={"eps": 1.2e-3}), 1e-3) == WRONG  # the parameter 20% off
    assert _outcome(eps, replace(named, name="train mode", parameters={}), 1e-3) == WRONG
    assert _outcome(eps, replace(named, explains=False), 1e-3) == NOT_NAMED
    assert _outcome(eps, None, 1e-3) == NOT_NAMED
    # an equal explanation (the same precision) said beside the first counts as named
    tf32 = CauseFinding("products in tfloat32", "...", {}, explains=True)
    also = replace(tf32, alternatives=(NamedCause("products in float16", "...", {}),))
    assert _outcome(float16, also, None) == RIGHT
    assert _outcome(float16, tf32, None) == WRONG


@pytest.mark.slow
@pytest.mark.xdist_group("cause-selftest")
def test_the_tables(measured):
    reports, total = measured
    text = render_models(reports, total)
    assert re.search(r"^normalization eps +small_cnn +bn1 +named right +normalization eps +eps = 0.001 ", text, re.M)
    assert "named on correct ports (onnxruntime, threads:1): 0" in text
    table = markdown_models(reports, total)
    assert "| normalization eps | small_cnn | bn1 | 1 | 0 | 0 | eps = 0.001 |" in table
    assert f"| **all** | | | {len(causes())} (100.0%) | 0 | 0 | named on correct ports: 0 | |" in table


def _report(outcomes: list[str], named_on_correct: list[str]) -> dict:
    injections = [
        Injection(f"cause {i}", "small_cnn", "bn1", outcome, seconds=0.5).as_dict()
        for i, outcome in enumerate(outcomes)
    ]
    return {
        "model": "small_cnn",
        "injections": injections,
        "correct_ports": ["threads:1"],
        "named_on_correct": named_on_correct,
        "seconds": 1.0,
    }


@pytest.mark.parametrize(
    ("outcomes", "named_on_correct", "status"),
    [
        ([RIGHT] * 20, [], 0),
        ([RIGHT] * 19 + [NOT_NAMED], [], 0),  # 95 % named right: the target
        ([RIGHT] * 18 + [WRONG, NOT_NAMED], [], 1),  # 90 %
        ([RIGHT] * 20, ["threads:1: conv1: weights in bfloat16"], 1),  # a cause on a correct port
    ],
)
def test_the_selftest_exits_1_where_a_target_of_causes_is_missed(
    monkeypatch, capsys, outcomes, named_on_correct, status
):
    import accuracy.cli.selftest_command as selftest_command
    import accuracy.workflows.model.cause_selftest as cause_selftest
    import accuracy.workflows.model.quantization_selftest as quantization_selftest

    monkeypatch.setattr(selftest_command, "selftest", lambda *args, **kwargs: iter([]))
    monkeypatch.setattr(quantization_selftest, "quantization_selftest", lambda progress: iter([]))
    monkeypatch.setattr(cause_selftest, "model_selftest", lambda progress: iter([_report(outcomes, named_on_correct)]))
    assert main(["selftest", "--small", "--json"]) == status
    models = json.loads(capsys.readouterr().out)["models"]
    assert models["summary"]["named_right"] == outcomes.count(RIGHT)
    assert models["summary"]["named_on_correct"] == len(named_on_correct)
    assert models["summary"]["named_right_rate"] == outcomes.count(RIGHT) / len(outcomes)
