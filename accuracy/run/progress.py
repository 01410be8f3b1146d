"""A run you can follow: asv's full output to a log file, one progress line per benchmark class.

asv prints thousands of lines (its machine questionnaire, per-parameter tables, percentages
counted over steps of very different length). The terminal gets instead one line per finished
benchmark class with an estimate of the time left, weighted by what each class took in this
machine's earlier results; one line per environment asv creates, builds or installs into (minutes
of otherwise silent work in a history or matrix run); `-v` shows asv's own output as well.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

LOG_DIR = "logs"  # inside the results directory; asv and the report loader ignore it (no .json)
_TOTAL = re.compile(r"Running (\d+) total benchmarks \(.*\* (\d+) benchmarks\)")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
# asv's lines as it sets up an environment: "·· Creating virtualenv for virtualenv-py3.11-numpy2.3.5"
_SETUP = re.compile(
    r"^[·\s]*((?:Creating virtualenv|Installing requirements|Building|Installing) .*\b(?:for|into) \S+)"
)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def measured_costs(folder: Path, classes: Iterable[str]) -> dict[str, float]:
    """Seconds each benchmark class took in the newest results file of `folder` that ran it (asv
    records every benchmark's duration): the weights of the ETA. Early ETAs read 54-86 min for runs
    of a few minutes when every class counted as the mean of the first, heavy ones."""
    from asv.results import Results  # asv loads its plugins on import: only when a run starts

    wanted = set(classes)
    costs: dict[str, float] = {}
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    for path in files:
        if path.name == "machine.json":
            continue
        try:
            durations = Results.load(str(path)).duration
        except Exception:  # asv raises anything on a file it cannot read: that file gives no weights
            continue
        seconds: dict[str, float] = {}
        for name, duration in durations.items():
            owner = name.rsplit(".", 1)[0]
            if owner in wanted and isinstance(duration, (int, float)):
                seconds[owner] = seconds.get(owner, 0.0) + float(duration)
        costs |= seconds
    return costs


class ClassProgress:
    """Turns asv's output into one line per benchmark class: n/N, elapsed, ETA.

    `classes` are the benchmark classes (or modules, for free functions) the run selected, over
    all its batches; each commit x environment runs every one once, as asv's first
    "Running N total benchmarks" line tells. The ETA weights the classes left by `costs` (seconds
    per class, `measured_costs`; a class without one counts as the mean of those with one),
    scaled by how long the finished ones took against theirs. Each asv call says which classes it
    runs (`expect`): one that printed nothing still counts, so the count reaches its total.
    """

    def __init__(
        self,
        classes: list[str],
        out=None,
        passes: tuple[str, ...] = (),
        commits: int = 1,
        costs: dict[str, float] | None = None,
    ):
        self._classes = set(classes)
        self._out = out or sys.stdout
        self._passes = max(len(passes), 1)  # `opbench run` runs each class once per pass (suite_passes.py)
        self._commits = commits  # a history run calls asv once per commit (driver.py): asv counts one
        known = {c: s for c, s in (costs or {}).items() if c in self._classes and s > 0}
        mean = sum(known.values()) / len(known) if known else 1.0
        self._cost = {c: known.get(c, mean) for c in self._classes}
        self.stage = ""  # the pass running now, shown beside each class
        self.total = 0
        self.done = 0
        self._total_cost = self._done_cost = 0.0
        self._expected: tuple[str, ...] = ()  # the classes of the asv call running now
        self._entered: dict[str, int] = {}  # how often each was seen in it
        self._call_runs = 1  # commits x environments of that call
        self._current: str | None = None
        self._counted = True  # whether the class running now counts (its first time in this call)
        self._started = self._class_started = time.monotonic()

    def expect(self, classes: Iterable[str]) -> None:
        """The classes the next asv call runs (once per environment)."""
        self._expected, self._entered, self._call_runs = tuple(classes), {}, 1

    def feed(self, line: str) -> None:
        setup = _SETUP.search(line)
        if setup:
            print(
                f"asv: {setup.group(1)}, elapsed {_duration(time.monotonic() - self._started)}",
                file=self._out,
                flush=True,
            )
            return
        match = _TOTAL.search(line)
        if match:
            runs = int(match.group(1)) // max(int(match.group(2)), 1)  # commits x environments
            self._call_runs = runs
            if not self.total:  # the first batch: the clock starts; later batches go on counting
                self.total = len(self._classes) * runs * self._passes * self._commits
                self._total_cost = sum(self._cost.values()) * runs * self._passes * self._commits
                self._started = time.monotonic()
            return
        for match in _NAME.finditer(line):
            owner = self._owner(line, match)
            if owner:
                self._enter(owner)
                return

    def _owner(self, line: str, match: re.Match) -> str | None:
        """The class of a benchmark name; asv cuts a long one to its end
        ("...ttention.ScaledDotProductAttention.time_op")."""
        owner = match.group(0).rsplit(".", 1)[0]
        if owner in self._classes:
            return owner
        if line[max(match.start() - 3, 0) : match.start()] != "...":
            return None
        ends = [name for name in self._classes if name.endswith(owner)]
        return ends[0] if len(ends) == 1 else None

    def _enter(self, benchmark_class: str) -> None:
        if benchmark_class == self._current:
            return
        self._finish_class()
        seen = self._entered.get(benchmark_class, 0)
        self._entered[benchmark_class] = seen + 1
        self._current, self._class_started = benchmark_class, time.monotonic()
        # asv came back to a class it ran already in this call (benchmarks sharing a setup_cache run
        # together, across classes): counted once per run, or the count passed its total ([121/120])
        self._counted = seen < self._call_runs

    def _finish_class(self) -> None:
        if self._current is None or not self._counted:
            return
        self._count(1, self._cost.get(self._current, 0.0))
        now = time.monotonic()
        self._say(f"{self._current} ({self.stage}{_duration(now - self._class_started)})")

    def _count(self, units: int, cost: float) -> None:
        self.done += units
        self._done_cost += cost

    def _say(self, what: str) -> None:
        elapsed = time.monotonic() - self._started
        left = max(self._total_cost - self._done_cost, 0.0) if self.done < self.total else 0.0
        eta = f"ETA {_duration(elapsed * left / self._done_cost)}" if left and self._done_cost else "done"
        print(f"[{self.done}/{self.total}] {what}, elapsed {_duration(elapsed)}, {eta}", file=self._out, flush=True)

    def skip(self, classes: tuple[str, ...]) -> None:
        """A pass of `classes` that will not run after all: the count and the ETA leave it out."""
        self.total -= len(classes)
        self._total_cost -= sum(self._cost.get(c, 0.0) for c in classes)

    def finish(self) -> None:
        """The end of one asv call: an expected class it never named (no benchmark of it ran, or
        asv's line for it did not parse) is counted too, so the count reaches its total (it
        stopped at [236/240])."""
        self._finish_class()
        self._current = None
        missing = {c: self._call_runs - self._entered.get(c, 0) for c in self._expected}
        missing = {c: n for c, n in missing.items() if n > 0}
        if missing and self.total:
            self._count(sum(missing.values()), sum(self._cost.get(c, 0.0) * n for c, n in missing.items()))
            self._say(f"{self.stage}no output from {', '.join(sorted(missing))} (see the log)")
        self._expected, self._entered = (), {}


class AsvLog:
    """Runs asv commands with all their output appended to one log file."""

    def __init__(self, path: Path, verbose: bool):
        self.path = path
        self.verbose = verbose
        path.parent.mkdir(parents=True, exist_ok=True)

    def call(self, args: list[str], env: dict, progress: ClassProgress | None = None) -> int:
        """`python -P -m asv ARGS`; returns its exit status.

        -P: an asv.py in the current directory is never run in asv's place. asv runs in its own
        process group, so that a Ctrl-C (or a SIGTERM or SIGHUP that the caller turned into
        KeyboardInterrupt) is passed on to asv and every benchmark process it started. Wait for
        them to stop (killed after STOP_GRACE seconds), then re-raise.
        """
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(f"$ asv {' '.join(args)}\n")
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "asv", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",
                process_group=0,
            )
            assert proc.stdout is not None  # piped above
            try:
                for line in proc.stdout:
                    log.write(line)
                    if self.verbose:
                        print(line, end="", flush=True)
                    elif progress is not None:
                        progress.feed(line)
            except KeyboardInterrupt:
                _stop_group(proc)
                raise
            status = proc.wait()
        if progress is not None and not self.verbose:
            progress.finish()
        return status


STOP_GRACE = 30.0  # seconds asv gets to stop its benchmark processes after SIGINT


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGINT to asv's process group, as a Ctrl-C at the terminal sends; then SIGKILL to what is left.

    asv starts each benchmark process and its forkserver in a process group of their own
    (asv.util.check_output's setpgid), which a signal to asv's group never reaches: they are
    listed before asv goes, and any still alive after it are killed too.
    """
    import psutil

    family: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        family = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE)
    with contextlib.suppress(ProcessLookupError):  # asv gone: no benchmark process of its outlives it
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for child in family:
        with contextlib.suppress(psutil.Error):
            child.kill()
