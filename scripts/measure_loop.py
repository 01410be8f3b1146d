"""Measure the edit-run loop (issue 20): asv processes per profile, `opbench run` wall time, CLI latency.

Prints a markdown table with the commit and the load average, for docs/asv-suite.md. Measured
here, never timed in a test: timings depend on the machine and on what else it runs.

    python scripts/measure_loop.py --count                 # asv processes per profile, nothing run
    python scripts/measure_loop.py --cli                   # CLI latency, one process per command
    python scripts/measure_loop.py --forks                 # one fork of asv's server, per pass
    python scripts/measure_loop.py --run quick --run default   # opbench run end to end (minutes)
    python scripts/measure_loop.py --run history           # history runs of one and of two commits
    python scripts/measure_loop.py --make-test             # make test, then make test-fast, in a fresh clone
    python scripts/measure_loop.py --cli --repeat 3        # each timing three times in a row (runs: in rounds)

Counting is asv's own discovery of the suite under each profile (asv_runner.discovery): asv 0.6
starts one process per benchmark and parameter combination, plus one per setup_cache key and run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("quick", "default", "full")
RUNS = (*PROFILES, "history")
CLI = {  # what issue 20 budgets, one fresh process each
    "opbench --help": ["--help"],
    "opbench list": ["list"],
    "opbench info": ["info"],
    "opbench explain nosuchop (bad input)": ["explain", "nosuchop"],
    "opbench explain linear --dtype float32": ["explain", "linear", "--dtype", "float32"],
}
CHECK_LINE = "opbench check linear --inputs linear_in.npz"  # the README's check example
COUNT_CODE = """
import json, math, os, sys
sys.argv = [sys.argv[0], "discover"]  # what asv's discovery process sees
from asv_runner.discovery import disc_benchmarks
processes, keys, methods = 0, set(), 0
for b in disc_benchmarks(os.path.join(sys.path[0] or os.getcwd(), "benchmarks")):
    processes += math.prod(len(p) for p in b._params) if b._params else 1
    methods += 1
    if b.setup_cache_key is not None:
        keys.add(b.setup_cache_key)
print(json.dumps({"benchmarks": processes, "setup_cache": len(keys), "methods": methods}))
"""


def _env(**extra: str) -> dict[str, str]:
    """This checkout's code in every process, asv's benchmark processes included (ASV_PYTHONPATH)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return dict(os.environ, PYTHONPATH=path, ASV_PYTHONPATH=path, **extra)


def count(profile: str, suite_pass: str | None = None) -> dict:
    """asv processes of a plain `asv run` of the suite under `profile` (or of one of `opbench
    run`'s passes), from asv's discovery."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNT_CODE],
        cwd=ROOT,
        env=_env(OPBENCH_PROFILE=profile, **({"OPBENCH_PASS": suite_pass} if suite_pass else {})),
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return found | {"processes": found["benchmarks"] + found["setup_cache"]}


FORK_CODE = """
import gc, json, os, resource, sys, time
sys.argv = ["benchmark.py", "run_server"]  # what asv's forkserver is: it preloads the frameworks
import benchmarks.bench_elementwise
gc.freeze()
start = time.perf_counter()
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(json.dumps({"fork_s": (time.perf_counter() - start) / 20, "rss_mb": rss_mb}))
"""


def fork_cost(suite_pass: str) -> dict:
    """Seconds per fork of a server like asv's forkserver in `suite_pass`, and its memory."""
    proc = subprocess.run(
        [sys.executable, "-c", FORK_CODE],
        cwd=ROOT,
        env=_env(OPBENCH_PASS=suite_pass),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _timed(argv: list[str], cwd: Path = ROOT) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


def opbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "accuracy", *args]


def readme_check_block() -> str | None:
    """The shell block of the docs that holds the README's `opbench check` example."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8") if page.is_file() else "", re.S):
            if CHECK_LINE in block:
                return block
    return None


def time_check() -> tuple[float, int]:
    """The example's first `opbench check`, after its set-up lines ran untimed in a fresh folder."""
    block = readme_check_block()
    assert block is not None, "the docs lost the README's check example"
    lines = block.splitlines()
    first = next(i for i, line in enumerate(lines) if CHECK_LINE in line)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)
        subprocess.run(["bash", "-c", "\n".join(lines[:first])], cwd=folder, env=_env(), capture_output=True)
        return _timed(["bash", "-c", lines[first]], folder)


HISTORY = {"history": "HEAD^!", "history of two": "HEAD~2..HEAD"}  # one commit, then two (newest first)


def time_run(profile: str) -> tuple[float, int]:
    """`opbench run` end to end (asv, publish, report) into a scratch results folder. A history run
    is the default profile in asv's own environment (built by an earlier run) over HISTORY's
    range: a further commit costs what the two-commit run takes beyond the one-commit run."""
    with tempfile.TemporaryDirectory(prefix="opbench-measure-") as tmp:
        folder = Path(tmp)
        if profile in HISTORY:
            which = ["--commits", HISTORY[profile]]
        else:
            which = ["--quick"] if profile == "quick" else ["--profile", profile]
        return _timed(
            opbench(
                "run",
                *which,
                "--results",
                str(folder / "results"),
                "--html",
                str(folder / "html"),
                "--report",
                str(folder / "reports"),
            )
        )


def time_make_test() -> list[tuple[str, float, int]]:
    """`make test` in a fresh clone of this checkout's HEAD (a new venv: everything installed, as
    CI does), then `make test-fast` in that clone, as the edit-test loop runs it."""
    with tempfile.TemporaryDirectory(prefix="opbench-clone-") as tmp:
        clone = Path(tmp) / "opbench"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        timed = []
        for target in ("test", "test-fast"):
            start = time.perf_counter()
            proc = subprocess.run(["make", target], cwd=clone, capture_output=True, text=True)
            timed.append((f"`make {target}`", time.perf_counter() - start, proc.returncode))
        return timed


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", action="store_true", help="asv processes per profile (nothing is run)")
    parser.add_argument("--cli", action="store_true", help="CLI latency")
    parser.add_argument("--forks", action="store_true", help="what asv's fork of its server costs, per pass")
    parser.add_argument("--run", action="append", default=[], choices=RUNS, help="time `opbench run`")
    parser.add_argument("--make-test", action="store_true", help="`make test` and `make test-fast` in a fresh clone")
    parser.add_argument("--repeat", type=int, default=1, help="time each item this many times (the runs in rounds)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"commit {commit.stdout.strip()}, {os.cpu_count()} CPUs, load average before: {_load()}\n")
    rows: list[tuple[str, str, str]] = []

    def shown(seconds: float, status: int, answers: tuple[int, ...] = (0, 2)) -> str:
        """One measurement, with the load averages after it; an exit status other than `answers`
        (a verdict's 1, a bad input's 2) is shown."""
        digits = 2 if seconds < 10 else 0
        failed = "" if status in answers else f" (exit {status})"
        return f"{seconds:.{digits}f} s{failed} [{_load()}]"

    def repeated(measure, answers: tuple[int, ...] = (0, 2)) -> str:
        """Each of `--repeat` measurements in a row, after one untimed call: the budgets are for warm
        caches, and the first call after a fresh clone's `make test` or a history run (gigabytes of
        other virtualenvs read) loads the frameworks' libraries from disk (`explain`: 25-37 s)."""
        measure()
        return "; ".join(shown(*measure(), answers) for _ in range(args.repeat))

    # the runs go in rounds (quick, default, history, quick, ...): each history run is compared
    # with the default run just before it, under the same load
    walls: dict[str, list[str]] = {profile: [] for profile in args.run}
    further: list[str] = []  # per round: the two-commit history run's wall beyond the one-commit run's
    for _ in range(args.repeat if args.run else 0):
        for profile in RUNS:
            if profile in walls and profile != "history":
                walls[profile].append(shown(*time_run(profile)))
        if "history" in walls:
            one, two = time_run("history"), time_run("history of two")
            walls["history"].append(f"{shown(*one)}, two commits {shown(*two)}")
            further.append(f"{two[0] - one[0]:.0f} s")
    if args.count or args.run:
        for profile in RUNS:
            if args.count or profile in args.run:
                base = "default" if profile == "history" else profile
                c = count(base)
                wall = "; ".join(walls.get(profile, []))
                measure, read = count(base, "measure"), count(base, "read")
                detail = (
                    f"{c['processes']} ({c['benchmarks']} benchmark + {c['setup_cache']} setup_cache):"
                    f" {measure['processes']} measure pass + {read['processes']} read pass"
                )
                command = {"quick": "--quick", "history": "--commits HEAD^!, then HEAD~2..HEAD"}.get(
                    profile, f"--profile {profile}"
                )
                rows.append((f"`opbench run {command}`", detail, wall))
                if profile == "history" and further:
                    rows.append(("a further commit of a history run (two commits minus one)", "", "; ".join(further)))
    if args.forks:
        for suite_pass in ("measure", "read"):
            cost = fork_cost(suite_pass)
            rows.append(
                (f"one fork of the {suite_pass} pass's server ({cost['rss_mb']} MB)", "", f"{cost['fork_s']:.3f} s")
            )
    if args.cli:
        for label, cli_args in CLI.items():
            rows.append((f"`{label}`", "", repeated(lambda a=cli_args: _timed(opbench(*a)))))
        if readme_check_block() is not None:
            rows.append((f"`{CHECK_LINE} ...`", "", repeated(time_check, answers=(0, 1))))
    if args.make_test:
        runs = [time_make_test() for _ in range(args.repeat)]
        for i, (label, _, _) in enumerate(runs[0]):
            walls = [f"{run[i][1]:.0f} s" + ("" if run[i][2] == 0 else f" (exit {run[i][2]})") for run in runs]
            rows.append((label + (" in a fresh clone" if label == "`make test`" else ""), "", "; ".join(walls)))
    print("| what | asv processes | wall |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nload average after: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
