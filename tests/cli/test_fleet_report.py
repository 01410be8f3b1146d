"""One quick `opbench run` end to end (paired timing and accuracy, fingerprint, asv pages, report),
then a second machine's beside it: a fleet in one report (#21). The two runs are shared by both tests."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import run_main
from cli_runner import run_opbench as opbench

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fleet")]
MACHINES = ("alpha", "beta")


@functools.cache  # xdist tears module fixtures down whenever a worker's queue runs dry: run once
def _two_machines(root: Path) -> dict[str, subprocess.CompletedProcess]:
    runs = {}
    for machine in MACHINES:  # two machines' nightly runs, committed to one results repository
        runs[machine] = opbench(
            "run",
            "--quick",
            "--profile",  # every track, the output digest included: the quick profile records two
            "default",
            "--bench",
            r"bench_products\.Dot\.",
            "--results",
            str(root / "results"),
            "--machine",
            machine,
            *(["--report", str(root / "reports")] if machine == "alpha" else ["--no-report"]),
        )
    return runs


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory) -> Path:
    root = tmp_path_factory.getbasetemp() / "two-machines"
    root.mkdir(exist_ok=True)
    for run in _two_machines(root).values():
        assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    return root


def test_quick_run_records_paired_timing_and_accuracy(two_machines):
    results = two_machines / "results"
    files = [p for p in (results / "alpha").glob("*.json") if p.name != "machine.json"]
    assert len(files) == 1, files
    data, path = json.loads(files[0].read_text()), files[0]
    cols = data["result_columns"]
    values = {name: dict(zip(cols, row, strict=False)) for name, row in data["results"].items()}
    timing = values["bench_products.Dot.time_op"]
    assert all(v is not None and 0 < v < 1 for v in timing["result"])
    impls = list(timing["params"][0])
    assert "'numpy:np.dot@float32'" in impls and "'torch:torch.dot@float32'" in impls
    for track in ("track_max_ulp", "track_bound_ratio", "track_max_rel_fp64", "track_nonfinite"):
        assert values[f"bench_products.Dot.{track}"]["params"] == timing["params"]
    ulps = values["bench_products.Dot.track_max_ulp"]["result"]
    ratios = values["bench_products.Dot.track_bound_ratio"]["result"]
    assert all(u > 0 for u in ulps)  # a float32 dot of 4096 terms is never exact here
    # always provably within rounding; 0 where the result is correctly rounded (OpenBLAS's sdot on
    # this machine), which np.sum(x * y) never is on these inputs
    assert all(0 <= r < 1 for r in ratios) and max(ratios) > 0
    # the fingerprint sits beside the results file and names the BLAS that ran
    fp = json.loads(path.with_suffix(".fingerprint").read_text())
    assert any(lib["internal_api"] == "openblas" for lib in fp["blas"])
    # asv publish made history pages holding these benchmarks
    html = two_machines / "html"
    assert (html / "index.html").is_file()
    index = json.loads((html / "index.json").read_text())
    assert "bench_products.Dot.track_bound_ratio" in index["benchmarks"]
    assert list(html.glob("graphs/**/bench_products.Dot.time_op.json"))
    assert (two_machines / "reports" / "latest" / "index.html").is_file()


def test_two_machines_in_one_results_directory_are_set_side_by_side(two_machines, tmp_path, capsys):
    results = two_machines / "results"
    # each run files under its machine's name; the stack is asv's environment (the same on both)
    alpha, beta = sorted(p.name for p in results.iterdir() if p.is_dir() and p.name != "logs")
    assert (alpha, beta) == MACHINES
    # the second run started under the stack's last fingerprint and filed a fresh one all the same
    for machine in MACHINES:
        [fingerprint] = (results / machine).glob("*.fingerprint")
        assert json.loads(fingerprint.read_text())["blas"], machine
    report = run_main(capsys, "report", "--results", results, "--out", tmp_path / "fleet")
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
    compare = run_main(capsys, "compare", "--results", results, alpha, beta)
    assert f"bits: {cases} bitwise identical" in compare.stdout, compare.stdout
