"""One JSON policy (accuracy.core.json_output): the `--json` of every command is strict JSON, with
inf and NaN as null and a `<key>_reason` beside them, on results that hold both."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest
from cli_runner import run_main
from hypothesis import given
from hypothesis import strategies as st

from accuracy.catalog.registry import get_op
from accuracy.cli.main import build_parser
from accuracy.core.json_output import dumps, json_ready
from accuracy.judge.verdicts import BEYOND
from accuracy.workflows.model.report import ModelReport
from accuracy.workflows.model.rows import EndToEndVerdict, PortResult, UnitRow
from accuracy.workflows.selftest import CaseReport, Mutant


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as every strict parser does."""

    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def reason_of(value: float) -> str:
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


leaves = st.one_of(st.floats(), st.integers(), st.text(max_size=3), st.none(), st.booleans())
documents = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=4),
    max_leaves=20,
)


@given(documents)
def test_any_document_is_strict_json_and_keeps_every_finite_value(document):
    assert strict(dumps(document)) == strict(dumps(json_ready(document)))  # the policy is applied once
    assert strict(dumps(document)) == json_ready(document)


@given(st.dictionaries(st.sampled_from("abcd"), st.floats(allow_nan=True, allow_infinity=True), min_size=1))
def test_a_non_finite_value_is_null_with_its_reason_beside_it(row):
    out = strict(dumps({"row": row, "values": list(row.values())}))
    for key, value in row.items():
        if math.isfinite(value):
            assert out["row"][key] == value and f"{key}_reason" not in out["row"]
        else:
            assert out["row"][key] is None and out["row"][f"{key}_reason"] == reason_of(value)
    reasons = out.get("values_reason", [None] * len(row))
    assert reasons == [None if math.isfinite(v) else reason_of(v) for v in row.values()]


def test_numpy_scalars_and_tuples_are_written_as_json_holds_them():
    assert strict(dumps({"x": np.float32("inf"), "n": np.int64(3), "t": (1.5, np.float64("nan"))})) == {
        "x": None,
        "x_reason": "inf",
        "n": 3,
        "t": [1.5, None],
        "t_reason": [None, "nan"],
    }


def test_a_reason_key_that_is_already_a_field_is_refused():
    with pytest.raises(ValueError, match="'x_reason' is both a field and the reason for 'x'"):
        dumps({"x": math.inf, "x_reason": "mine"})


# --- every command's --json, on a result with inf and NaN ---------------------------------------

JSON_COMMANDS = {"list", "info", "explain", "check", "scan", "selftest", "compare", "model", "generate"}


def test_these_are_all_the_commands_with_json():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    with_json = {name for name, p in sub.choices.items() if any(a.dest == "json" for a in p._actions)}
    assert with_json == JSON_COMMANDS


def with_non_finite(record: dict) -> dict:
    return {**record, "opbench_test_inf": math.inf, "opbench_test_nan": math.nan}


def test_list_and_info(monkeypatch, capsys):
    import accuracy.backends.environment as environment
    import accuracy.cli.list_command as list_command

    catalog = list_command.catalog
    monkeypatch.setattr(list_command, "catalog", lambda: [with_non_finite(o) for o in catalog()])
    fingerprint = environment.fingerprint
    monkeypatch.setattr(environment, "fingerprint", lambda full: with_non_finite(fingerprint(full=full)))
    for command in ("list", "info"):
        done = run_main(capsys, command, "--json")
        assert done.returncode == 0, done.stderr
        out = strict(done.stdout)
        first = out[0] if command == "list" else out
        assert first["opbench_test_inf"] is None and first["opbench_test_inf_reason"] == "inf"
        assert first["opbench_test_nan"] is None and first["opbench_test_nan_reason"] == "nan"


def test_check_with_an_infinite_output(tmp_path, monkeypatch, capsys):
    """An output with inf where linear's result is finite: its error is infinite; the ratios that
    do not apply to a float32 output are NaN."""
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "inputs", "linear", "--size", 64, "--save", "lin.npz").returncode == 0
    z = np.load("lin.npz")
    output = z["x"] @ z["W"].T + z["b"]
    output[0, 0] = np.inf
    np.save("inf.npy", output)
    done = run_main(capsys, "check", "linear", "--inputs", "lin.npz", "--output", "inf=inf.npy", "--json")
    assert done.returncode == 1, done.stderr
    (row,) = strict(done.stdout)["outputs"]
    assert row["verdict"] == "beyond rounding"
    assert row["worst"]["index"] == [0, 0] and row["worst"]["result"] is None
    assert row["worst"]["result_reason"] == row["worst"]["error_ulp_reason"] == "inf"
    assert row["typical_ratio"] is None and row["typical_ratio_reason"] == "nan"


def test_explain(monkeypatch, capsys):
    import accuracy.workflows.explain as explain_module

    explain = explain_module.explain

    def with_infinite_rows(*args, **kwargs):
        report = explain(*args, **kwargs)
        report["implementations"] = [with_non_finite(r) for r in report["implementations"]]
        return report

    monkeypatch.setattr(explain_module, "explain", with_infinite_rows)
    done = run_main(capsys, "explain", "sqrt", "--dtype", "float16", "--size", 64, "--threads", 1, "--json")
    assert done.returncode == 0, done.stderr
    for row in strict(done.stdout)["implementations"]:
        assert row["opbench_test_inf"] is None and row["opbench_test_inf_reason"] == "inf"


def test_scan_of_an_implementation_that_returns_inf(monkeypatch, capsys):
    """numpy's float16 sqrt with sqrt(4) = inf: an infinite ulp error, as a scan really measures it."""
    import accuracy.workflows.scan as scan_module

    op = get_op("sqrt")

    def overflowing(ns, x):
        return np.where(x == 4, np.float16(np.inf), ns.sqrt(x))

    impl = replace(op.impl("numpy:np.sqrt"), variant="overflowing", fn=overflowing)
    monkeypatch.setattr(scan_module, "select_impls", lambda op, fmt, names: [impl])
    done = run_main(capsys, "scan", "sqrt", "--dtype", "float16", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = strict(done.stdout)["implementations"]
    assert row["max_ulp"] is None and row["max_ulp_reason"] == "inf"
    assert row["worst"][0]["x"] == "0x4400" and row["worst"][0]["ulp_reason"] == "inf"


def test_selftest_whose_least_accurate_correct_implementation_is_exact(monkeypatch, capsys):
    """Every correct implementation exact (0 ulp): the smallest caught mutant is infinitely many
    times the least accurate correct one."""
    import accuracy.cli.selftest_command as selftest_command

    case = CaseReport("sum", "float64", "random", 64, correct=3, least_ulp=0.0)
    case.mutants = [Mutant("sum: off by 2 ulp", np.empty(0), 2.0, "beyond rounding")]
    monkeypatch.setattr(selftest_command, "selftest", lambda *args, **kwargs: iter([case]))
    done = run_main(capsys, "selftest", "sum", "--small", "--dtype", "float64", "--json")
    (reported,) = strict(done.stdout)["cases"]
    smallest = {"mutant": "sum: off by 2 ulp", "error_ulp": 2.0, "x_least": None, "x_least_reason": "inf"}
    assert reported["smallest_caught"] == smallest


def test_model_with_an_infinite_layer_error(monkeypatch, capsys, tmp_path):
    """--json strict; the --html page, drawn from the same dict, still says inf where it was."""
    import accuracy.workflows.model.sweep as model_sweep

    layer = UnitRow("fc", ["fc"], "linear", None, 0, BEYOND, "overflow", tier="typical tier", introduced=0.5, worst={})
    layer = replace(layer, max_ulp=math.inf, typical_ratio=math.nan, bound_ratio=math.inf)
    output = {"relative_error": math.inf, "max_abs_error": math.inf, "reference_relative_error": 1e-7}
    end = EndToEndVerdict(BEYOND, "output error inf", "fc")
    port = PortResult("torch", "torch eager", "float32", "fc", 1, 1, 0, 0, 0.5, [layer], output, end, 0.0)
    report = ModelReport(model="m:f", mode="eval", inputs={"x": [1, 4]}, ports=[port])
    monkeypatch.setattr(model_sweep, "run_model", lambda *args, **kwargs: report)
    page = tmp_path / "model.html"
    done = run_main(capsys, "model", "m:f", "--inputs", "x=1x4", "--html", page, "--json")
    assert done.returncode == 1, done.stderr
    (fc,) = strict(done.stdout)["ports"][0]["layers"]
    assert fc["max_ulp"] is None and fc["max_ulp_reason"] == "inf" and fc["typical_ratio_reason"] == "nan"
    text = page.read_text()
    cells = re.findall(r"<td>(.*?)</td>", text)  # layer, op, max_ulp, introduced, inherited, propagated, cause
    assert cells == ["fc", "linear", "inf", "0.5", "-", "-", ""]  # no cause: none tried
    assert "<td class='red'>beyond rounding</td>" in text and "<summary>overflow</summary>" in text
