"""The report read by a user (issue 22 item 9): every result without a value explained, no reference
benchmark in Speed, sizes as integers, short environment labels, a per-backend speed tally."""

from __future__ import annotations

import datetime
import math

import pytest
from fixtures_answers import COMMITS, ENV, MACHINE, NP_VAR, TORCH_SIGMOID, _measure, benchmarks, write_suite_results

from accuracy.report.render import backend_tally, without_value, write_report
from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_result_file

OTHER_ENV = "virtualenv-py3.11-numpy2.4.6-torch2.13.0-scipy1.16.2-onnxruntime1.23.2"
REFERENCE = SyntheticBenchmark(
    "bench_references.CorrectlyRounded.time_exact", "time", "seconds", ("func", "dtype"), (("exp",), ("float32",))
)


def _with_gaps(measure):
    """One failed benchmark, one skipped combination and one vacuous bound, on top of the suite."""

    def gaps(bench: SyntheticBenchmark, combo: tuple):
        impl, threads = combo[0].rpartition("@")[0], combo[-1]
        metric = bench.name.rsplit(".", 1)[-1]
        if bench is REFERENCE:
            return [1e-3] * 4
        if impl == NP_VAR and metric == "time_op" and threads == 2:
            return None  # raised: asv records None
        if impl == TORCH_SIGMOID and threads == 2:
            return math.nan  # skipped: asv records NaN for every benchmark of the combination
        if bench.name.startswith("bench_products") and metric == "track_bound_ratio" and threads == 1:
            return math.nan  # the case ran; its bound is vacuous
        return measure(bench, combo)

    return gaps


# every test reads one report: on one worker, so that it is written once (twice before, 8 s each)
pytestmark = pytest.mark.xdist_group("readable-report")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    import numpy as np

    root = tmp_path_factory.mktemp("readable")
    results = root / "results"
    write_suite_results(results)
    everything = [*benchmarks(), REFERENCE]
    write_benchmarks(results, everything)
    date = datetime.datetime(2026, 2, 3, tzinfo=datetime.UTC)
    measure = _with_gaps(_measure(1, np.random.default_rng(1)))
    for env in (ENV, OTHER_ENV):
        write_result_file(results, MACHINE, env, COMMITS[1], date, everything, measure, {})
    index = write_report(results, root / "reports", "latest")
    return index.read_text(), (index.parent / "report.md").read_text(), results


def test_every_result_without_a_value_is_explained_by_category(report):
    from accuracy.report.load import load_results

    page, _, results = report
    frame = load_results(results).frame
    counts = {why.split(" (")[0]: len(rows) for why, rows in without_value(frame).items()}
    # per environment: Var numpy at 2 threads, one size: 1 failed time; Sigmoid torch at 2 threads, one
    # size: every benchmark of its class skipped; Linear's bound ratio at 1 thread: 4 impls x 2 sizes
    n_benchmarks = len(benchmarks()) // 3  # time_op and the tracks of one class
    assert counts == {"failed": 2, "vacuous bound ratios": 16, "skipped parameter combinations": 2 * n_benchmarks}
    assert f"{2 + 16 + 2 * n_benchmarks}: 2 failed" in page
    assert "16 vacuous bound ratios" in page
    assert "bench_reductions.Var.time_op: failed for 2 parameter combinations" in page  # in Warnings, by name


def test_speed_names_implementations_only(report):
    page, markdown, _ = report
    speed = page.split('id="speed"')[1].split('id="changes"')[0]
    assert "CorrectlyRounded" not in speed and ">nan<" not in speed
    assert "CorrectlyRounded" not in markdown.split("## Speed")[1].split("## Changes")[0]


def test_sizes_print_as_integers(report):
    page, markdown, _ = report
    assert "65536" in markdown and "6.554e+04" not in markdown and "6.55e+04" not in markdown
    assert "6.554e+04" not in page and "6.55e+04" not in page


def test_two_environments_get_short_labels_and_a_legend(report):
    page, _, _ = report
    verdicts = page.split('id="verdicts"')[1].split('id="discrepancies"')[0]
    assert "<td>E1</td>" in verdicts and "<td>E2</td>" in verdicts
    assert f"<code>{MACHINE}/{OTHER_ENV}</code>" in verdicts or OTHER_ENV in verdicts.split("<table>")[0]
    assert OTHER_ENV not in "".join(verdicts.split("<table>")[1:])  # the rows carry the label only


def test_backend_tally_counts_every_op(report):
    from accuracy.report.answers import answer
    from accuracy.report.load import load_results

    _, _, results = report
    frame = load_results(results).frame
    speed = answer(frame, results).speed
    tally = backend_tally(speed).set_index("backend")
    assert tally["fastest"].sum() == len(speed) and set(speed["op"]) >= {"linear", "var", "sigmoid"}
    page = report[0]
    assert "Which backend is fastest?" in page


def test_the_page_and_the_markdown_follow_the_one_list_of_sections(report):
    """The page's links, its h2 sections and report.md's sections in SECTIONS' order: a section
    is added in one place (the list once named its keys apart from the page's own list)."""
    import re

    from accuracy.report.render import SECTIONS

    page, markdown, _ = report
    keys = [section.key for section in SECTIONS]
    nav = re.search(r"<nav>(.*?)</nav>", page).group(1)
    assert re.findall(r'<a href="#([^"]+)">', nav) == keys
    assert re.findall(r'<h2 id="([^"]+)">', page) == keys
    headings = re.findall(r"^## (\w+)", markdown, re.M)
    assert headings == [
        "Verdicts", "Discrepancies", "Reproducibility", "Speed", "Changes", "Self", "Machines",
        "Regressions", "Improvements", "Skipped",
    ]  # fmt: skip
