"""The rows of `opbench model` are typed (issue 54): a unit's row, a port's end-to-end verdict, a
port's own input judged, a port's result and a port absent are frozen dataclasses read by
attribute, and their JSON is made once, at the edge.

`--json` must not change with the types: a field that was never set is absent, never `null`, and
the keys keep the order the dicts had (the zoo's reports are byte-identical before and after).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accuracy.core.json_output import dumps, json_ready, json_restored
from accuracy.judge.verdicts import BEYOND, NOT_COMPARED, RUNTIME_LIMIT, WITHIN, WITHIN_NOISE
from accuracy.workflows.model.generation import GenerateReport
from accuracy.workflows.model.report import ModelReport
from accuracy.workflows.model.rows import AbsentPort, EndToEndVerdict, InputRow, PortResult, UnitRow
from accuracy.workflows.model.unit import CauseFinding

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=32)
NUMBER = FINITE | st.sampled_from([math.inf, -math.inf])  # an error too large to count: null in --json
TEXT = st.text(st.characters(codec="utf-8"), max_size=20)
CAUSE = st.builds(CauseFinding, name=TEXT, words=TEXT, explains=st.booleans())
PLACE = ["path", "covers", "op", "parent", "depth"]
# the keys of a judged row, as function_tier.judged_row gives them (verdict first) ...
JUDGED = ["verdict", "reason", "compute", "contract", "max_ulp", "typical_ratio", "bound_ratio", "threshold_ulp"]
JUDGED += ["lapack_ratio", "worst"]
# ... and of a lookup or quantized unit's (its four numbers first)
NUMBERS_FIRST = ["max_ulp", "typical_ratio", "bound_ratio", "worst"]
PORT = ["port", "description", "dtype", "first_not_within", "compared", "flagged", "runtime_limits"]
PORT += ["not_compared", "worst_introduced", "layers", "output", "end_to_end", "seconds"]


def _optional(strategy):
    return st.none() | strategy


@st.composite
def unit_rows(draw) -> UnitRow:
    """Any row a sweep makes: not compared, another output shape with its cause, or judged (by
    judged_row, or a lookup's or quantized unit's numbers), each optional field set or not."""
    kind = draw(st.sampled_from(["not compared", "other shape", "judged", "numbers first"]))
    row = UnitRow(
        path=draw(TEXT),
        covers=draw(st.lists(TEXT, max_size=2)),
        op=draw(TEXT),
        parent=draw(_optional(TEXT)),
        depth=draw(st.integers(0, 4)),
        verdict=NOT_COMPARED if kind == "not compared" else draw(st.sampled_from([WITHIN, BEYOND, RUNTIME_LIMIT])),
        reason=draw(TEXT),
        propagated=draw(_optional(NUMBER)),
        inherited=draw(_optional(NUMBER)),
        own_code=draw(_optional(st.booleans())),
        error_by_position=draw(_optional(st.lists(NUMBER, max_size=3))),
    )
    if kind == "other shape":
        return dataclasses.replace(row, cause=draw(CAUSE), worst={})
    if kind == "not compared":
        return row
    judged = dataclasses.replace(
        row,
        registry_op=draw(_optional(TEXT)),
        tier=draw(TEXT),
        introduced=draw(FINITE),
        max_ulp=draw(_optional(NUMBER)),
        typical_ratio=draw(_optional(NUMBER)),
        bound_ratio=draw(_optional(NUMBER)),
        worst={},
        cause=draw(_optional(CAUSE)),
        runtime_limit=draw(_optional(TEXT)),
    )
    if kind == "judged":
        return dataclasses.replace(judged, compute="float32", contract="", threshold_ulp=1.0, lapack_ratio=0.5)
    return dataclasses.replace(judged, quantization=draw(_optional(st.just({"ratio": 0.5}))))


def _set(row, *names: str) -> list[str]:
    return [n for n in names if getattr(row, n) is not None]


@given(unit_rows())
def test_a_rows_json_omits_each_field_never_set_and_keeps_the_dicts_key_order(row):
    written = row.to_json()
    expected = [*PLACE, *_set(row, "propagated", "inherited", "registry_op")]
    if row.tier is None:
        expected += ["verdict", "reason", *_set(row, "cause", "worst")]
    elif row.compute is not None:
        expected += [*JUDGED, "tier", "introduced", *_set(row, "cause", "runtime_limit")]
    else:
        expected += [*NUMBERS_FIRST, *_set(row, "quantization"), "verdict", "reason", "tier", "introduced"]
        expected += _set(row, "cause", "runtime_limit")
    expected += _set(row, "own_code", "error_by_position")
    assert list(written) == expected
    assert all(written[k] is getattr(row, k) for k in written)
    assert None not in [written[k] for k in written if k not in ("parent", "max_ulp", "typical_ratio", "bound_ratio")]
    text = dumps(row)  # the edge: json_output writes a row through its to_json, strict JSON
    assert list(json.loads(text))[: len(PLACE)] == PLACE
    back = UnitRow.from_json(json_restored(json.loads(text)))  # a saved report read back: the same row
    assert back == row and type(back.verdict) is type(row.verdict)


INPUT_ROW = st.builds(
    InputRow, input=TEXT, layer=TEXT, verdict=st.sampled_from([WITHIN, BEYOND]), reason=TEXT, cause=_optional(CAUSE)
)


@given(st.lists(unit_rows(), max_size=3), _optional(st.lists(INPUT_ROW, max_size=1)))
def test_a_ports_json_has_its_inputs_only_where_the_port_shows_them(layers, inputs):
    end = EndToEndVerdict(WITHIN, "output error 1e-07", None)
    output = {"relative_error": 1e-7, "max_abs_error": 1e-6, "reference_relative_error": 1e-7}
    port = PortResult("p", "d", "float32", None, len(layers), 0, 0, 0, None, layers, output, end, 1.5, inputs)
    written = json_ready(ModelReport("m", "eval", {}, [port]).as_dict())["ports"][0]
    assert list(written) == PORT + (["inputs"] if inputs is not None else [])
    assert written["layers"] == [json_ready(r.to_json()) for r in layers]
    assert written["end_to_end"] == {"verdict": WITHIN, "reason": "output error 1e-07", "first_departs": None}
    for row, own in zip(inputs or [], written.get("inputs", []), strict=True):  # a cause only where one was found
        assert list(own) == ["input", "layer", "verdict", "reason", *(["cause"] if row.cause is not None else [])]
    saved = json.loads(dumps(ModelReport("m", "eval", {}, [port]).as_dict()))
    back = ModelReport.from_json(saved).ports
    assert back == [port]  # the page of a saved report is drawn from the same rows
    assert all(type(i.verdict) is type(row.verdict) for i, row in zip(back[0].inputs or [], inputs or [], strict=True))


@given(st.lists(st.builds(AbsentPort, TEXT, TEXT), max_size=3))
def test_an_absent_port_writes_its_port_and_reason_and_reads_back_typed(absent):
    saved = json.loads(dumps(ModelReport("m", "eval", {}, [], absent).as_dict()))
    assert saved["absent_ports"] == [{"port": a.port, "reason": a.reason} for a in absent]
    assert all(list(a) == ["port", "reason"] for a in saved["absent_ports"])
    assert ModelReport.from_json(saved).absent == absent


def test_an_end_to_end_verdict_writes_its_quantization_cause_and_skipped_causes_only_when_set():
    plain = EndToEndVerdict(BEYOND, "output error 3", "fc")
    assert list(plain.to_json()) == ["verdict", "reason", "first_departs"]
    skipped = [{"name": "zero point stuck at 0", "reason": "its runtime's clipping is not read"}]
    noisy = EndToEndVerdict(BEYOND, "output 5x its noise", None, {"ratio": 5.0}, skipped=skipped)
    assert list(noisy.to_json()) == ["verdict", "reason", "first_departs", "quantization", "skipped"]
    found = CauseFinding(name="range from other data", explains=True, path="fc")
    explained = EndToEndVerdict(WITHIN_NOISE, "output", "fc", {"ratio": 0.9}, cause=found)
    assert list(explained.to_json()) == ["verdict", "reason", "first_departs", "quantization", "cause"]
    assert json_ready(explained)["cause"] == json_ready(found.to_json())


def test_rows_are_frozen_and_travel_by_pickle_as_they_are():
    """A row is made complete once: one that gains a field later is a new row. A Dask worker sends
    its port's result back pickled: the same typed result arrives, its verdicts the enum."""
    row = UnitRow("fc", ["fc"], "Linear (linear)", None, 0, WITHIN, "0.5x", tier="registry op linear")
    end = EndToEndVerdict(WITHIN, "output error 1e-07", None)
    given = InputRow("x", "conv1", BEYOND, "3x", CauseFinding(name="BGR for RGB", explains=True))
    port = PortResult("p", "d", "float32", None, 1, 0, 0, 0, 1e-7, [row], {}, end, 0.1, [given])
    absent = AbsentPort("cuda", "no CUDA device on this machine")
    for typed, field in ((row, "verdict"), (end, "verdict"), (port, "layers"), (given, "cause"), (absent, "port")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(typed, field, None)
    assert dataclasses.replace(row, own_code=True).to_json()["own_code"] is True and row.own_code is None
    back = pickle.loads(pickle.dumps(port))
    assert back == port and back.layers[0].verdict is WITHIN and back.end_to_end.verdict is WITHIN
    assert back.inputs == [given] and back.inputs[0].verdict is BEYOND


def test_generates_absent_ports_are_the_same_typed_rows_with_the_same_json():
    """`opbench generate` reports a port that did not run as `opbench model` does: the same row."""
    why = "the decoder with past key/values does not export: TypeError: no"
    report = GenerateReport("m", [1, 2], 1, [3], [], [AbsentPort("onnxruntime-cache", why)])
    assert report.as_dict()["absent_ports"] == [{"port": "onnxruntime-cache", "reason": why}]
    assert report.answers()[-1] == f"onnxruntime-cache: absent: {why}"
