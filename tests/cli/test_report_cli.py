"""`opbench report`: files written, exit codes, one-line errors."""

import argparse
import shutil
from pathlib import Path

import pandas as pd
import pytest
from cli_runner import run_opbench
from fixtures_report import GFLOPS, INJECTED, make_one_result_dir

import accuracy.cli.main
from accuracy.cli import report_command as report_cli

REPORT_FILES = {
    "index.html",
    "report.md",
    "results.csv",
    "results.parquet",
    "regressions.csv",
    "improvements.csv",
    "steps.csv",
    "comparisons.csv",
    "data_dictionary.csv",
    "data_dictionary.md",
    ".opbench-owned",  # the mark that lets the next report replace this directory (issue 40 item 1)
}


@pytest.fixture
def opbench_main(monkeypatch):
    """The real `accuracy.cli.main.main`, with only the report command registered."""
    monkeypatch.setattr(accuracy.cli.main, "COMMAND_MODULES", ("accuracy.cli.report_command",))
    return accuracy.cli.main.main


def test_register_adds_report_with_defaults():
    parser = argparse.ArgumentParser()
    report_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report"])
    assert (args.results, args.out, args.name) == (Path("results"), Path("reports"), "latest")
    assert args.func is report_cli.run


def test_report_writes_html_markdown_and_data(opbench_main, shared_results, tmp_path, capsys):
    assert opbench_main(["report", "--results", str(shared_results), "--out", str(tmp_path), "--name", "n1"]) == 0
    out = tmp_path / "n1"
    assert {p.name for p in out.iterdir()} == REPORT_FILES
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    regressions = pd.read_csv(out / "regressions.csv")
    timing_steps = sum(name.endswith("time_linear") for name, *_ in INJECTED)
    assert len(regressions) == len(INJECTED) + timing_steps  # each timing step also drops GFLOP/s
    assert pd.read_csv(out / "improvements.csv").empty
    markdown = (out / "report.md").read_text()
    assert f"- Regressions: {len(INJECTED) + timing_steps}" in markdown and GFLOPS in markdown
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") >= 3 and "<link" not in page and "<script" not in page


@pytest.mark.parametrize("argv_tail", [["--results", "/nonexistent/results"], ["--name", "../escape"]])
def test_user_errors_exit_2_with_one_line(opbench_main, shared_results, tmp_path, capsys, argv_tail):
    argv = ["report", "--results", str(shared_results), "--out", str(tmp_path), *argv_tail]
    assert opbench_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("opbench: error: ") and err.count("\n") == 1
    assert not (tmp_path / "latest").exists()


def test_skipped_files_are_warned_on_stderr(opbench_main, shared_results, tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(shared_results, results)
    bad = next(p for p in results.rglob("*.json") if p.name not in ("machine.json", "benchmarks.json"))
    bad.write_text("{")
    assert opbench_main(["report", "--results", str(results), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"opbench: warning: {bad}: skipped, unreadable results file")
    warnings = [
        line for line in (tmp_path / "out" / "latest" / "report.md").read_text().splitlines() if str(bad) in line
    ]
    assert len(warnings) == 1


@pytest.mark.slow
def test_python_dash_m_accuracy_report(tmp_path):
    """The module runs as the console script does (the report's contents: the tests above)."""
    done = run_opbench("report", "--results", make_one_result_dir(tmp_path / "in"), "--out", tmp_path)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "latest").iterdir()} >= REPORT_FILES
    bad = run_opbench("report", "--results", tmp_path / "none")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
