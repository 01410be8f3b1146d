"""End to end: the registry-generated asv suite through `opbench run`, asv check, publish."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_main, start_opbench

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _results_file(results: Path) -> dict:
    files = [p for p in results.glob("*/*.json") if p.name != "machine.json"]
    assert len(files) == 1, files
    return json.loads(files[0].read_text()), files[0]


def test_asv_check_passes_on_the_suite(tmp_path):
    from accuracy.run.driver import write_private_config

    config = write_private_config(ROOT / "asv.conf.json", tmp_path / "r", tmp_path / "h", tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "check", "--config", str(config), "--python=same"],
        capture_output=True,
        text=True,
        env=dict(os.environ, OPBENCH_PROFILE="quick"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


TINY_CONF = {
    "version": 1,
    "project": "tiny",
    "repo": ".",
    "branches": ["main"],
    "dvcs": "git",
    "environment_type": "virtualenv",
    "pythons": [f"{sys.version_info.major}.{sys.version_info.minor}"],
    # each commit is installed by copying its package into the virtualenv: pip's build, install and
    # uninstall took ~5 s a commit, and what is under test is opbench's run over the history
    "build_command": [],
    "install_command": [
        'python -c "import shutil, sys, sysconfig; '
        "shutil.copytree(sys.argv[1], sysconfig.get_path('purelib') + '/tiny')\" {build_dir}/tiny"
    ],
    "uninstall_command": [
        "return-code=any python -c \"import shutil, sysconfig; shutil.rmtree(sysconfig.get_path('purelib') + '/tiny')\""
    ],
    "launch_method": "forkserver",
    "benchmark_dir": "benchmarks",
    "env_dir": ".asv/env",
    "results_dir": "results",
    "html_dir": "html",
}

TINY_BENCH = """
def track_value():
    import tiny  # here, not at import: a run in the test's environment (no tiny) still discovers the suite

    return tiny.VALUE
track_value.unit = "ulp"

def time_sum():
    sum(range(1000))

def track_crashes():
    raise RuntimeError("this op is broken")
"""


def _git(repo: Path, *args):
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env=dict(
            os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
        ),
    )


@pytest.fixture
def tiny_repo(tmp_path, tmp_path_factory):
    """A three-commit project whose tracked value changes 1 -> 2 -> 3, plus a crashing benchmark.

    Its asv virtualenvs are shared by the tests of one worker (group `tiny-asv`): asv creates one
    once (pip installs asv_runner and its tools there: ~8 s) and installs each test's commits into
    it, as it does for a project's commits."""
    repo = tmp_path / "tiny"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "tiny").mkdir()
    envs = tmp_path_factory.getbasetemp() / "tiny-asv-envs"
    (repo / "asv.conf.json").write_text(json.dumps(TINY_CONF | {"env_dir": str(envs)}))
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_tiny.py").write_text(TINY_BENCH)
    (repo / ".gitignore").write_text(".asv/\nresults/\nhtml/\n")
    _git(repo, "init", "-q", "-b", "main")
    for value in (1, 2, 3):
        (repo / "tiny" / "__init__.py").write_text(f"VALUE = {value}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"value {value}")
    return repo


@pytest.mark.xdist_group("tiny-asv")  # the tiny projects' virtualenv (tiny_repo)
def test_history_across_three_commits_then_this_environment_on_the_same_machine(
    tiny_repo, tmp_path, monkeypatch, capsys
):
    """History, with a failing benchmark recorded and the run going on; then a run in this
    environment, which asv's pages show as the same machine (issue 22 item 8: they were `ci` and
    `ci-<digest>`), the legend naming Python by version and stack label, never by a path.

    That run finds no fingerprint of this stack saved, so it takes one first and keeps it. The next
    run starts on the saved one (every framework imported takes seconds) while a fresh one is taken
    beside it: a stack that changed where the quick key does not look (here, the saved fingerprint
    altered) is caught before anything is saved, and the fresh one is kept for the run after."""
    monkeypatch.setenv("OPBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tiny_repo)
    results = tmp_path / "results"
    first = subprocess.run(
        ["git", "-C", str(tiny_repo), "rev-list", "--max-parents=0", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    # a second module: two batches in this environment, but one per commit of a history run (each
    # commit is saved as it ends), so one asv call per commit
    (tiny_repo / "benchmarks" / "bench_second.py").write_text("def track_one():\n    return 1\n")
    # the root commit alone, then the rest of history: two runs accumulate in one results dir
    common = ["--config", str(tiny_repo / "asv.conf.json"), "--results", str(results), "--machine", "ci"]
    run_main(capsys, "run", *common, "--commits", f"{first}^!", "--no-report")
    proc = run_main(capsys, "run", *common, "--commits", f"{first}..HEAD", "--no-report")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "failed" in proc.stdout  # the crash is reported, and the run went on
    # commit by commit, each installed once: given the range, every asv call reinstalled each commit
    log = sorted((results / "logs").glob("*.log"))[-1].read_text()
    newest, older = subprocess.run(
        ["git", "-C", str(tiny_repo), "rev-list", f"{first}..HEAD"], capture_output=True, text=True
    ).stdout.split()
    installs = re.findall(r"Installing ([0-9a-f]{8}) ", log)
    assert installs == [newest[:8], older[:8]], installs
    assert log.count(" total benchmarks (1 commits * 1 environments") == 2  # both modules, at each of two commits
    files = sorted(p for p in (results / "ci").glob("*.json") if p.name != "machine.json")
    assert len(files) == 3
    tracked = []
    for f in files:
        data = json.loads(f.read_text())
        rows = {k: dict(zip(data["result_columns"], v, strict=False)) for k, v in data["results"].items()}
        tracked.append(rows["bench_tiny.track_value"]["result"][0])
        assert rows["bench_tiny.track_crashes"]["result"] is None  # recorded as failed
        assert rows["bench_tiny.time_sum"]["result"][0] > 0  # the run went on after the crash
    assert sorted(tracked) == [1, 2, 3]
    graph = next((tmp_path / "html").glob("graphs/**/bench_tiny.track_value.json"))
    assert [point[1] for point in json.loads(graph.read_text())] == [1, 2, 3]

    saved_before = set((tmp_path / "cache" / "fingerprints").glob("*.json"))  # the history's environments
    here = run_main(capsys, "run", *common, "--no-report")
    assert here.returncode == 0, here.stderr[-3000:] + here.stdout[-3000:]
    [label] = re.findall(r"environment (env-[0-9a-f]{8}) \(compare it by that name\)", here.stdout)
    assert sorted(p.name for p in results.iterdir() if not p.name.startswith(".")) == ["benchmarks.json", "ci", "logs"]
    index = json.loads((tmp_path / "html" / "index.json").read_text())
    assert index["params"]["machine"] == ["ci"]
    assert sorted(index["params"]["python"]) == ["3.11", f"3.11 {label}"]
    envs = {json.loads(p.read_text())["env_name"] for p in (results / "ci").glob("*.json") if p.name != "machine.json"}
    assert len(envs) == 2 and any(e.endswith(f"_{label}_python") for e in envs)
    # the label is how a user names the set
    itself = run_main(capsys, "compare", "--results", str(results), label, label)
    assert itself.returncode == 2 and "are the same result set (1 results file)" in itself.stderr, itself.stderr
    [history_env] = envs - {e for e in envs if e.endswith(f"_{label}_python")}
    compared = run_main(capsys, "compare", "--results", str(results), history_env, label)
    # both names resolve; the tiny suite has no op cases for compare to pair
    assert f"and NEW {label!r} share no benchmark results" in compared.stderr, compared.stderr

    [saved] = set((tmp_path / "cache" / "fingerprints").glob("*.json")) - saved_before  # this stack's, kept
    files = {p: p.read_bytes() for p in (results / "ci").iterdir()}
    [filed] = [
        p.with_suffix(".fingerprint")
        for p in files
        if p.suffix == ".json" and p.name != "machine.json" and label in json.loads(p.read_text())["env_name"]
    ]
    stale = json.loads(saved.read_text())
    stale["packages"]["a-package-since-removed"] = "1.0"
    saved.write_text(json.dumps(stale))
    changed = run_main(capsys, "run", *common, "--no-report")
    # issue 40 item 21: the batch measured the stack the fresh label names: filed there, not thrown away
    assert changed.returncode == 0, changed.stderr
    [warning] = [line for line in changed.stderr.splitlines() if "opbench: warning:" in line]
    assert f"this environment's stack is {label} now, not env-" in warning and f"results filed under {label}" in warning
    assert {p.name for p in (results / "ci").iterdir()} == {p.name for p in files}  # nothing under the stale label
    [refiled] = [
        p
        for p in (results / "ci").glob("*.json")
        if p.name != "machine.json" and label in json.loads(p.read_text())["env_name"]
    ]
    assert refiled.read_bytes() != files[refiled]  # this run's numbers
    assert json.loads(saved.read_text())["packages"] == json.loads(files[filed])["packages"]  # the fresh one, kept


BATCH_BENCHES = {
    "bench_a.py": "def track_first():\n    return 1\n",
    # long enough that the SIGINT lands while it runs, however loaded the machine
    "bench_b.py": "import time\n\ndef track_second():\n    time.sleep(600)\n    return 2\ntrack_second.timeout = 900\n",
}


def _session_processes(session: int) -> list[int]:
    """The processes still alive in a session (field 6 of /proc/PID/stat)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


@pytest.mark.parametrize(
    "stop,by",
    [
        ("SIGINT", ""),  # Ctrl-C: SIGINT to the process group, as a terminal sends it
        ("SIGTERM", " by SIGTERM"),  # kill, a job scheduler: to opbench alone (SIGHUP, a closed
        # terminal, takes the same handler: tests/run/test_run_keys_and_progress.py)
    ],
)
def test_interrupted_run_keeps_every_finished_batch_and_says_which(tmp_path, stop, by):
    """Stopped during the second batch: the first is kept, nothing is left behind."""
    import signal
    import time

    from asv.results import Results

    from accuracy.report.load import load_results

    repo = tmp_path / "proj"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "asv.conf.json").write_text(json.dumps(TINY_CONF | {"project": "proj"}))
    (repo / "benchmarks" / "__init__.py").write_text("")
    for name, source in BATCH_BENCHES.items():
        (repo / "benchmarks" / name).write_text(source)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "two batches")
    results = tmp_path / "results"
    proc = start_opbench(
        "run",
        "--config",
        repo / "asv.conf.json",
        "--results",
        results,
        "--machine",
        "ci",
        "--no-report",
        cwd=repo,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while not list(results.glob("ci/*.fingerprint")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    time.sleep(2)  # into the second batch
    if stop == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, getattr(signal, stop))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    for _ in range(30):  # SIGKILLed processes take a moment to be reaped
        if not _session_processes(proc.pid):
            break
        time.sleep(0.5)
    assert _session_processes(proc.pid) == []  # asv and its benchmark processes stopped with it
    assert (results / ".opbench.lock").read_text() == ""  # no stale pid
    machine_dir = results / "ci"
    described = json.loads((machine_dir / "machine.json").read_text())
    assert all(described[field] for field in ("arch", "cpu", "os", "ram")), described  # not [none] in asv's pages
    assert err.strip().splitlines() == [
        f"opbench: error: interrupted{by}: kept 1 of 2 batches in {machine_dir}: bench_a; "
        "not run or not finished, so not saved: bench_b; HTML not published"
    ]
    [path] = [p for p in machine_dir.glob("*.json") if p.name != "machine.json"]
    saved = Results.load(str(path), machine_name=machine_dir.name)
    assert {name: saved.get_result_value(name, []) for name in saved.get_all_result_keys()} == {
        "bench_a.track_first": [1]
    }
    load = json.loads(path.with_suffix(".fingerprint").read_text())["load"]  # how busy the machine was
    assert load["cpus"] == os.cpu_count() and load["max_1min"] >= 0
    frame = load_results(results).frame
    assert frame["benchmark"].tolist() == ["bench_a.track_first"] and frame["value"].tolist() == [1]
    assert not list(tmp_path.glob(".results-staging-*"))  # the staging copy is gone
