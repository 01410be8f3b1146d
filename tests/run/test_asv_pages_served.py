"""asv's pages as a user opens them (issue 44 #4): from disk they fail, served by the command
`opbench run` ends with they work, and a crowded graph keeps its legend off the plot."""

from __future__ import annotations

import datetime
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chromium import chromium, needs_chromium
from test_asv_pages import _git

from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file
from accuracy.run.offline_pages import INDEX, MAX_LEGEND, finish_pages, serve_command, serve_line

PARAMS = ("impl_dtype", "size", "threads")
CROWDED = SyntheticBenchmark(  # Matmul.track_max_ulp's shape: 24 implementations x dtypes, 2 sizes
    "bench_products.Matmul.track_max_ulp",
    "track",
    "ulp",
    PARAMS,
    (tuple(f"impl{i}:f@float32" for i in range(24)), (64, 256), (2,)),
)
FEW = SyntheticBenchmark(
    "bench_products.Dot.time_op", "time", "seconds", PARAMS, (("numpy:np.dot@float32",), (64, 256), (2,))
)

pytestmark = [pytest.mark.slow, needs_chromium]  # asv publish and Chromium


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    """Two commits published by asv, then opbench's finishing touches, as `opbench run` leaves them."""
    root = tmp_path_factory.mktemp("served")
    repo = root / "repo"
    _git("init", "-q", "-b", "main", str(repo))
    results = root / "results"
    write_machine(results, "box")
    write_benchmarks(results, [CROWDED, FEW])
    for day in (1, 2):
        _git("-C", str(repo), "commit", "-q", "--allow-empty", "-m", f"day {day}")
        commit = _git("-C", str(repo), "rev-parse", "HEAD")
        date = datetime.datetime(2026, 1, day, tzinfo=datetime.UTC)

        def measure(bench, combo, day=day):
            return [1e-3 * day] * 3 if bench is FEW else float(int(combo[0][4:6].rstrip(":")) + day)

        write_result_file(results, "box", "py3.11", commit, date, [CROWDED, FEW], measure)
    config = root / "asv.conf.json"
    config.write_text(
        f'{{"version": 1, "project": "opbench", "repo": "{repo}", "branches": ["main"], '
        f'"results_dir": "{results}", "html_dir": "{root / "html"}"}}'
    )
    subprocess.run([sys.executable, "-m", "asv", "publish", "--config", str(config)], check=True, capture_output=True)
    assert finish_pages(root / "html") == []
    return root / "html"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(html):
    """The pages served by exactly the command `opbench run` prints."""
    port = _free_port()
    server = subprocess.Popen(
        shlex.split(serve_command(html, port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_from_disk_the_pages_fail_served_they_work(html, served, tmp_path):
    from_disk = chromium(tmp_path / "p0", "--dump-dom", (html / INDEX).as_uri() + f"#{FEW.name}")
    assert "Error fetching content" in from_disk and 'class="flot-base"' not in from_disk
    page = chromium(tmp_path / "p1", "--dump-dom", f"{served}{INDEX}#{FEW.name}")
    assert 'class="flot-base"' in page and "Error fetching content" not in page
    assert serve_line(html) == f"{serve_command(html)} then open http://127.0.0.1:8000/"


def test_a_crowded_graph_has_no_legend_over_it_and_a_small_one_keeps_its(served, tmp_path):
    crowded = chromium(tmp_path / "p0", "--dump-dom", f"{served}{INDEX}#{CROWDED.name}")
    few = chromium(tmp_path / "p1", "--dump-dom", f"{served}{INDEX}#{FEW.name}")
    assert 'class="flot-base"' in crowded and 'class="flot-base"' in few  # both drawn
    assert crowded.count('class="legendLabel"') == 0  # 24 curves > MAX_LEGEND: no legend
    assert few.count('class="legendLabel"') == 2 <= MAX_LEGEND  # one implementation at two sizes
