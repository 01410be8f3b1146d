"""A fleet in one report (#21): two machines' results in one results directory, side by side."""

from __future__ import annotations

import pytest
from cli_runner import run_opbench as opbench

pytestmark = pytest.mark.slow


def test_two_machines_in_one_results_directory_are_set_side_by_side(tmp_path):
    results = tmp_path / "results"
    for machine in ("alpha", "beta"):  # two machines' nightly runs, committed to one results repository
        run = opbench(
            "run",
            "--quick",
            "--profile",  # every track, the output digest included: the quick profile records two
            "default",
            "--bench",
            r"bench_products\.Dot\.",
            "--results",
            str(results),
            "--machine",
            machine,
            "--report",
            str(tmp_path / machine),
        )
        assert run.returncode == 0, run.stderr[-3000:]
    # each run files under its machine's name; the stack is asv's environment (the same on both)
    alpha, beta = sorted(p.name for p in results.iterdir() if p.is_dir() and p.name != "logs")
    assert (alpha, beta) == ("alpha", "beta")
    report = opbench("report", "--results", str(results), "--out", str(tmp_path / "fleet"))
    assert report.returncode == 0, report.stderr
    markdown = (tmp_path / "fleet" / "latest" / "report.md").read_text()
    section = markdown.split("## Machines side by side", 1)[1].split("\n## ", 1)[0]
    # the same host twice: every Dot case gives the same bits and the same verdict on both
    headline = next(line for line in section.splitlines() if line.startswith(f"{beta} vs {alpha}:"))
    cases = int(headline.split(": ")[1].split(" cases")[0])
    assert cases >= 4 and f"{cases} bitwise identical, 0 with different verdicts" in headline
    assert f"median time ratio {beta}/{alpha}" in headline
    assert section.count("| bitwise identical |") == cases and "within rounding" in section
    html = (tmp_path / "fleet" / "latest" / "index.html").read_text()
    assert '<h2 id="machines">' in html and f"{beta} vs {alpha}" in html
    # and the same decision as `opbench compare` between the two machines
    compare = opbench("compare", "--results", str(results), alpha, beta)
    assert f"bits: {cases} bitwise identical" in compare.stdout, compare.stdout
