"""asv's HTML pages offline: every CDN file vendored, and the pages render with the network cut off."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import asv
import pytest
from chromium import chromium, needs_chromium, offline_site

from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file
from accuracy.run.offline_pages import BY_URL, INDEX, PACKAGES, VENDOR_DIR, make_offline, remote_urls

ASV_INDEX = Path(asv.__file__).parent / "www" / INDEX
BENCHMARK = "bench_products.Linear.time_op"
IMPLS = ("torch:F.linear@float32", "numpy:x @ W.T + b@float32")
# Chromium's own background calls (updates, sign-in, autofill): not the page's requests
CHROMIUM_SERVICES = re.compile(r"\b[\w.-]*(google\.com|googleapis\.com|gstatic\.com)\b")
CDN_HOSTS = sorted({url.split("/")[2] for url in BY_URL})


def _git(*args):
    return subprocess.run(
        ["git", *args],
        capture_output=True,
        text=True,
        check=True,
        env=dict(
            os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
        ),
    ).stdout.strip()


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """`asv publish` of one commit's synthetic timings: an html directory as asv leaves it."""
    root = tmp_path_factory.mktemp("asvpages")
    repo = root / "repo"
    _git("init", "-q", "-b", "main", str(repo))
    _git("-C", str(repo), "commit", "-q", "--allow-empty", "-m", "one")
    commit = _git("-C", str(repo), "rev-parse", "HEAD")
    bench = SyntheticBenchmark(
        BENCHMARK, "time", "seconds", ("impl_dtype", "size", "threads"), (IMPLS, (64, 256), (1, 2))
    )
    results = root / "results"
    write_machine(results, "box")
    write_benchmarks(results, [bench])
    write_result_file(
        results,
        "box",
        "py3.11",
        commit,
        datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        [bench],
        lambda _, combo: [1e-3 * combo[1] / 64 * (1 + 0.01 * k) for k in range(4)],
    )
    config = root / "asv.conf.json"
    config.write_text(
        f'{{"version": 1, "project": "opbench", "repo": "{repo}", "branches": ["main"], '
        f'"results_dir": "{results}", "html_dir": "{root / "html"}"}}'
    )
    subprocess.run([sys.executable, "-m", "asv", "publish", "--config", str(config)], check=True, capture_output=True)
    return root / "html"


@pytest.fixture(scope="module")
def offline(published, tmp_path_factory) -> Path:
    html = tmp_path_factory.mktemp("offline") / "html"
    shutil.copytree(published, html)
    assert make_offline(html) == []  # every address vendored; asv's SRI hashes agree where it names the bytes
    return html


def test_every_address_asv_loads_from_a_cdn_is_pinned():
    urls = remote_urls(ASV_INDEX.read_text())
    assert len(urls) == 10  # asv 0.6.6: jquery, 4 x flot, orderBars, stupidtable, md5, bootstrap js + css
    assert set(urls) <= set(BY_URL)


@pytest.mark.slow  # end to end: asv publish
def test_pages_point_at_local_copies(offline):
    page = (offline / INDEX).read_text()
    assert remote_urls(page) == []
    assert "integrity=" not in page and "crossorigin=" not in page
    local = re.findall(rf'(?:src|href)="({VENDOR_DIR}/[^"]+)"', page)
    assert len(local) == 10 and all((offline / path).stat().st_size > 1000 for path in local)
    for package in PACKAGES:  # licences and package.json go along
        assert (offline / VENDOR_DIR / package.folder / "package.json").is_file()


@pytest.mark.slow  # asv publish and Chromium
@needs_chromium
def test_asv_pages_render_with_the_network_cut_off(published, offline, tmp_path):
    # as asv publishes them, the pages ask the CDNs and show the error page instead
    with offline_site(published) as (base, _, proxy, refused):
        dom = chromium(tmp_path / "p0", "--dump-dom", base + INDEX, proxy=proxy)
    assert "Can not determine continental origin of swallow" in dom
    assert {host for host in CDN_HOSTS if any(host in line for line in refused)}

    with offline_site(offline) as (base, served, proxy, refused):
        listing = chromium(tmp_path / "p1", "--dump-dom", base + INDEX + "#/summarylist", proxy=proxy)
        graph = chromium(tmp_path / "p2", "--dump-dom", f"{base}{INDEX}#{BENCHMARK}", proxy=proxy)
    assert [line for line in refused if not CHROMIUM_SERVICES.search(line)] == []
    assert served and all(status in (200, 304) for _, status in served), served
    assert any(path.startswith("/graphs/") and BENCHMARK in path for path, _ in served)
    # the benchmark list: one row per parameter combination
    assert listing.count(f">{BENCHMARK}<") == 8
    assert "continental origin" not in listing + graph
    # the graph: flot drew its canvas, with y ticks spanning the data (1 to 4 ms)
    assert 'class="flot-base"' in graph
    ticks = [float(t) for t in re.findall(r'class="flot-tick-label[^>]*>([\d.]+)<', graph)]
    assert len(ticks) >= 4 and max(ticks) >= 4


@pytest.mark.slow  # end to end: asv publish
def test_a_plain_asv_publish_keeps_the_pages_offline_and_every_implementation_drawn(published, tmp_path):
    """Issue 22 items 7 and 8: `asv publish` as a user types it, with the plugin asv.conf.json names."""
    from asv.util import load_json

    from accuracy.run.offline_pages import GRAPH_SCRIPT

    plugins = load_json(str(Path(__file__).resolve().parents[2] / "asv.conf.json"), js_comments=True)["plugins"]
    config = json.loads(next(published.parent.glob("asv.conf.json")).read_text())
    html = tmp_path / "html"
    (tmp_path / "asv.conf.json").write_text(json.dumps(config | {"html_dir": str(html), "plugins": plugins}))
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "publish"], cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert remote_urls((html / INDEX).read_text()) == []  # no CDN address left
    assert all((html / VENDOR_DIR / package.folder).is_dir() for package in PACKAGES)
    script = (html / GRAPH_SCRIPT).read_text()
    assert "(k == 0 || j == 0 || (j+1)*count <= max_curves)" in script
