"""The report's answer tables on suite results with known answers (tests/fixtures_answers.py)."""

from __future__ import annotations

import json
import re

import pytest
from fixtures_answers import (
    ADDMM,
    COMMITS,
    F_LINEAR,
    NP_VAR,
    NUMPY_FORMULA,
    OPS,
    ORT_SIGMOID,
    SLOWER,
    TORCH_FORMULA,
    TORCH_VAR,
)

from accuracy.cli.run_command import summarize
from accuracy.report import answers as answer_tables
from accuracy.report.load import load_results
from accuracy.report.render import write_report


@pytest.fixture(scope="module")
def frame(suite_results):
    return load_results(suite_results).frame


@pytest.fixture(scope="module")
def answers(frame, suite_results):
    return answer_tables.answer(frame, suite_results)


def test_cases_are_the_newest_commit_one_row_each(answers):
    cases = answers.cases
    assert set(cases["commit_hash"]) == {COMMITS[1]}
    assert len(cases) == sum(len(impls) * len(sizes) * 2 for _, impls, sizes in OPS.values())
    assert {F_LINEAR, ORT_SIGMOID, NP_VAR} <= set(cases["implementation"])  # full names, backend included


def test_verdicts_list_exactly_the_implementations_not_within_rounding(answers):
    table = answers.verdicts
    assert list(zip(table["op"], table["implementation"], table["verdict"], strict=False)) == [
        ("sigmoid", ORT_SIGMOID, "beyond rounding"),  # bound ratio 5.8e4 sorts before 16
        ("var", NP_VAR, "beyond rounding (semantics: ddof=0)"),
    ]
    sigmoid, var = table.to_dict("records")
    assert sigmoid["reason"].startswith("max error 5.8e+04x the worst-case rounding bound")
    assert "known finding: MLAS" in sigmoid["reason"]
    assert var["reason"].startswith("computes something else by design (ddof=0); max error 16x")
    assert (sigmoid["sizes"], sigmoid["threads"]) == ("65536", "1, 2")


def test_discrepancies_group_identical_bits_and_judge_each_group(answers):
    rows = {row["op"]: row for row in answers.discrepancies.to_dict("records")}
    assert set(rows) == {"linear", "sigmoid", "var"}
    linear = rows["linear"]
    assert (linear["size"], linear["threads"], linear["implementations"], linear["distinct_outputs"]) == (2048, 2, 4, 3)
    groups = {tuple(g["implementations"]): g["verdict"] for g in linear["groups"]}
    assert groups == {
        (F_LINEAR, ADDMM): "within rounding",
        (TORCH_FORMULA,): "within rounding",
        (NUMPY_FORMULA,): "within rounding",
    }
    assert linear["answer"] == "3 different outputs, all within rounding: the differences are rounding, not bugs"
    assert (
        rows["var"]["answer"]
        == f"2 different outputs; not within rounding: {NP_VAR}: beyond rounding (semantics: ddof=0)"
    )
    var_groups = {g["implementations"][0]: g["varies_run_to_run"] for g in rows["var"]["groups"]}
    assert var_groups == {NP_VAR: False, TORCH_VAR: True}
    assert list(answers.discrepancies["op"]) == ["sigmoid", "var", "linear"]  # outputs not within rounding first
    assert answer_tables.pair_answer(answers.discrepancies) == (
        f"{F_LINEAR} vs {TORCH_FORMULA} (linear, float32, size 2048): different bits, both within rounding: "
        "rounding, not a bug"
    )
    assert answer_tables.pair_answer(answers.discrepancies, "linear", "F.linear", "addmm(b, x, W.T)").startswith(
        f"{F_LINEAR} vs {ADDMM} (linear, float32, size 2048): bitwise identical, both within rounding"
    )


def test_reproducibility_lists_thread_and_run_to_run_changes(answers):
    table = answers.reproducibility
    assert sorted(zip(table["op"], table["implementation"], table["size"], table["changes_with"], strict=False)) == [
        ("linear", NUMPY_FORMULA, 512, "thread count (1 vs all cores)"),
        ("linear", NUMPY_FORMULA, 2048, "thread count (1 vs all cores)"),
        ("var", TORCH_VAR, 1024, "run to run (same threads)"),
    ]
    assert set(table["verdict"]) == {"within rounding"}


def test_speed_names_the_fastest_against_measured_and_theoretical_peak(answers):
    peak = answers.peak
    # theoretical: 2 cores x 2.0 GHz x (256-bit / 32-bit lanes) x 2 (FMA) x 2 units = 128 GFLOP/s
    assert peak.theoretical[("", "float32", 2)] == pytest.approx(128.0)
    assert peak.theoretical[("", "float32", 1)] == pytest.approx(64.0)
    assert peak.theoretical[("", "float64", 2)] == pytest.approx(64.0)
    assert "Test CPU: 2 cores x 2000 MHz x 256-bit vectors with FMA" in peak.basis
    rows = {(r["op"], r["threads"]): r for r in answers.speed.to_dict("records")}
    linear = rows[("linear", 2)]
    assert (linear["fastest"], linear["size"], linear["runner_up"]) == (F_LINEAR, 2048, TORCH_FORMULA)
    rate, what = peak.measured[("", "float32", 2)]
    assert linear["gflops"] == pytest.approx(rate) and what == f"linear {F_LINEAR} at size 2048"
    assert linear["pct_measured_peak"] == pytest.approx(100)
    assert linear["pct_theoretical_peak"] == pytest.approx(100 * rate / 128)
    assert 20 < rate < 32  # the fixture's ~28 GFLOP/s at 2 threads
    assert rows[("sigmoid", 2)]["gflops"] != rows[("sigmoid", 2)]["gflops"]  # no flop count: no rate, no peak


def test_changes_use_compares_verdicts_against_the_previous_commit(answers):
    changes = answers.changes
    assert (changes.base, changes.new) == (f"commit {COMMITS[0][:8]} (py3.11)", f"commit {COMMITS[1][:8]} (py3.11)")
    assert changes.summary[0] == "NOT SAFE: 4 significant slowdowns beyond 10%"
    table = changes.table
    slower = table.loc[table["verdict"] == "slower"]
    assert set(slower["implementation"]) == {SLOWER[0]} and len(slower) == 4
    assert slower["time_ratio"].to_numpy() == pytest.approx(SLOWER[1], rel=0.02)
    assert set(table.loc[table["verdict"] == "not reproducible", "implementation"]) == {TORCH_VAR}
    assert set(table["op"]) == {"linear", "var"}


def test_run_summary_counts_cases_by_verdict(suite_results):
    files = [p for p in suite_results.glob("*/*.json") if p.name != "machine.json"]
    newest = [p for p in files if p.name.startswith(COMMITS[1][:8])]
    # 24 cases; np.var and ORT's Sigmoid, one size and two thread counts each, are beyond rounding
    assert summarize(newest) == [
        "accuracy cases by verdict: 20 within rounding, 0 suspicious, 4 beyond rounding, 0 undetermined"
    ]


def test_page_opens_with_the_answers_and_has_a_section_per_op(suite_results, tmp_path):
    page = write_report(suite_results, tmp_path, "r", max_plots=1).read_text()
    headings = re.findall(r'<h2 id="([\w-]+)">', page)
    assert headings[:6] == ["verdicts", "discrepancies", "reproducibility", "speed", "changes", "self-test"]
    # the first lines answer the three questions
    assert (
        f"<b>Bug or rounding?</b> {F_LINEAR} vs {TORCH_FORMULA} (linear, float32, size 2048): different bits, "
        "both within rounding: rounding, not a bug. "
        f"2 not within rounding: {ORT_SIGMOID} (sigmoid, float32), {NP_VAR} (var, float32). "
        "In 1 of 3 op/dtype cases where implementations give different bits, every one is within rounding"
    ) in page
    assert re.search(
        r"best large GEMM 2\d\.\d GFLOP/s \(linear torch:F.linear at size 2048, float32, 2 thread\(s\)\), "
        r"2\d% of the theoretical 128 GFLOP/s",
        page,
    )
    assert (
        f"<b>Not reproducible?</b> 3 cases change bits with the thread count or from run to run: "
        f"{NUMPY_FORMULA} (linear), {TORCH_VAR} (var)."
    ) in page
    assert re.findall(r'<h3 id="op-(\w+)">', page) == ["linear", "sigmoid", "var"]
    assert f'<code>{F_LINEAR}</code> = <code>{ADDMM}</code>: <span class="within">within rounding</span>' in page
    assert page.count('href="#op-var"') >= 3  # verdicts, discrepancies, reproducibility link to the detail
    assert '<span class="beyond">beyond rounding (semantics: ddof=0)</span>' in page
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "beyond rounding (semantics: ddof=0)" in markdown and "NOT SAFE: 4 significant slowdowns" in markdown


def test_selftest_summary_from_the_results_else_the_kept_copy(tmp_path):
    from accuracy.catalog.registry import all_ops
    from accuracy.report.selftest_saved import KEPT, find_selftest

    kept = find_selftest(tmp_path)
    assert kept.path == KEPT and len(kept.commit) == 40
    ops = {case["op"] for case in kept.cases}
    assert ops <= {op.name for op in all_ops()} and len(ops) >= 50  # ops added since it was saved are absent
    assert kept.summary["false_alarms"] == 0 and kept.summary["catch_rate"] > 0.99
    summary = {
        "cases": 2,
        "correct_judgements": 9,
        "false_alarms": 1,
        "confirmed_alarms": 0,
        "undetermined": 0,
        "must_catch": 8,
        "caught": 6,
        "catch_rate": 0.75,
    }
    (tmp_path / "selftest.json").write_text(json.dumps({"summary": summary, "cases": []}))
    own = find_selftest(tmp_path)
    assert own.path == tmp_path / "selftest.json" and own.commit == ""
    assert own.headline() == (
        "1 false alarms in 9 judgements of correct implementations; 6 of 8 must-catch mutants "
        "caught (75.0%); 0 confirmed alarms (library findings); 2 op/dtype/condition cases"
    )
