"""The report under load and beside a matrix run (issue 44 #3): no fastest crowned on a busy
machine, Changes between the run's own commits, counts per case rather than per environment."""

from __future__ import annotations

import datetime
import hashlib
import re

import numpy as np
import pytest
from fixtures_answers import COMMITS, DATES, ENV, FINGERPRINT, MACHINE, NP_VAR, ORT_SIGMOID, _measure, benchmarks

from accuracy.report import answers as answer_tables
from accuracy.report.load import load_results
from accuracy.report.render import write_report
from accuracy.report.synthetic import write_benchmarks, write_machine, write_result_file

MATRIX_COMMIT = hashlib.sha1(b"matrix").hexdigest()
MATRIX_ENVS = ("virtualenv-py3.11-numpy2.3.5", "virtualenv-py3.11-numpy2.4.6")


def write(root, load: float, matrix: bool = False):
    """The answers fixture's two-commit history, its fingerprint recording `load` on 2 CPUs; with
    `matrix`, two matrix environments at a newer commit beside it."""
    rng = np.random.default_rng(7)
    fingerprint = FINGERPRINT | {"load": {"max_1min": load, "cpus": 2}}
    write_machine(root, MACHINE)
    write_benchmarks(root, benchmarks())
    for i, (commit, date) in enumerate(zip(COMMITS, DATES, strict=True)):
        write_result_file(root, MACHINE, ENV, commit, date, benchmarks(), _measure(i, rng), fingerprint)
    if matrix:
        later = DATES[1] + datetime.timedelta(days=1)
        for env in MATRIX_ENVS:
            write_result_file(root, MACHINE, env, MATRIX_COMMIT, later, benchmarks(), _measure(0, rng), fingerprint)
    return root


@pytest.mark.parametrize("load", [1.5, 6.2])
def test_speed_crowns_no_fastest_on_a_busy_machine(tmp_path, load):
    results = write(tmp_path / "results", load)
    answers = answer_tables.answer(load_results(results).frame, results)
    busy = load > 3  # the busy-machine rule: above the CPU count plus one
    assert answers.busy == ({"": "load average up to 6.2 on 2 CPUs during the run"} if busy else {})
    assert (answers.speed["fastest"] == "").all() == busy and (answers.speed["fastest"] != "").all() != busy
    assert answers.speed["time"].notna().all()  # the times are still shown
    page = write_report(results, tmp_path / "reports", "r", max_plots=0).read_text()
    said = "The machine was busy (load average up to 6.2 on 2 CPUs during the run): no fastest is named there."
    assert (said in page) == busy
    assert ("none named: load average up to 6.2" in page) == busy


def test_changes_compare_the_runs_own_commits_beside_a_matrix_run(tmp_path):
    """A matrix run at a newer commit (two environments, one commit each) used to take over the
    Changes section, which compared its two environments instead of the history's commits."""
    results = write(tmp_path / "results", 1.0, matrix=True)
    changes = answer_tables.changes(load_results(results).frame, results)
    assert (changes.base, changes.new) == (f"commit {COMMITS[0][:8]} (py3.11)", f"commit {COMMITS[1][:8]} (py3.11)")
    assert changes.summary[0] == "NOT SAFE: 4 significant slowdowns beyond 10%"


def test_the_lead_counts_each_case_once_across_environments(tmp_path):
    """np.var and ORT's Sigmoid are beyond rounding in all three environments: 2, not 6; the
    same for the cases that change bits."""
    results = write(tmp_path / "results", 1.0, matrix=True)
    page = write_report(results, tmp_path / "reports", "r", max_plots=0).read_text()
    count = re.search(r"(\d+) not within rounding: (.*?)\. In ", page)
    assert count is not None and count.group(1) == "2", count
    assert NP_VAR in count.group(2) and ORT_SIGMOID in count.group(2)
    # numpy's x @ W.T + b at two sizes and torch.var: 3 cases, not 3 per environment
    assert "<b>Not reproducible?</b> 3 cases change bits" in page
