"""A run you can follow: asv's full output to a log file, one progress line per benchmark class.

asv prints thousands of lines (its machine questionnaire, per-parameter tables, percentages
counted over steps of very different length). The terminal gets instead one line per finished
benchmark class with an estimate of the time left; `-v` shows asv's own output as well.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

LOG_DIR = "logs"  # inside the results directory; asv and the report loader ignore it (no .json)
_TOTAL = re.compile(r"Running (\d+) total benchmarks \(.*\* (\d+) benchmarks\)")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ClassProgress:
    """Turns asv's output into one line per benchmark class: n/N, elapsed, ETA.

    The class list comes from the benchmarks.json that asv writes right before it announces
    "Running N total benchmarks"; the ETA is the mean measured time of the finished classes
    times the classes left.
    """

    def __init__(self, benchmarks_json: Path, regex: str | None = None, out=None):
        self._benchmarks_json = benchmarks_json
        self._regex = re.compile(regex or "")
        self._out = out or sys.stdout
        self._names: set[str] = set()
        self.total = 0
        self.done = 0
        self._current: str | None = None
        self._started = self._class_started = time.monotonic()

    def feed(self, line: str) -> None:
        match = _TOTAL.search(line)
        if match:
            self._start(int(match.group(1)) // max(int(match.group(2)), 1))
            return
        for token in _NAME.findall(line):
            if token in self._names:
                self._enter(token.rsplit(".", 1)[0])
                return

    def _start(self, rounds: int) -> None:
        """`rounds`: commits x environments; each runs every class once."""
        names = json.loads(self._benchmarks_json.read_text(encoding="utf-8"))
        # asv saves every benchmark it discovered; --bench selects with re.search, as here
        self._names = {name for name in names if name != "version" and self._regex.search(name)}
        self.total = len({name.rsplit(".", 1)[0] for name in self._names}) * rounds
        self._started = time.monotonic()

    def _enter(self, benchmark_class: str) -> None:
        if benchmark_class == self._current:
            return
        self._finish_class()
        self._current, self._class_started = benchmark_class, time.monotonic()

    def _finish_class(self) -> None:
        if self._current is None:
            return
        self.done += 1
        now = time.monotonic()
        elapsed = now - self._started
        left = max(self.total - self.done, 0)
        eta = f"ETA {_duration(elapsed / self.done * left)}" if left else "done"
        print(f"[{self.done}/{self.total}] {self._current} ({_duration(now - self._class_started)}), "
              f"elapsed {_duration(elapsed)}, {eta}", file=self._out, flush=True)

    def finish(self) -> None:
        self._finish_class()
        self._current = None


class AsvLog:
    """Runs asv commands with all their output appended to one log file."""

    def __init__(self, path: Path, verbose: bool):
        self.path = path
        self.verbose = verbose
        path.parent.mkdir(parents=True, exist_ok=True)

    def call(self, args: list[str], env: dict, progress: ClassProgress | None = None) -> int:
        """`python -m asv ARGS`; returns its exit status. Ctrl-C reaches asv too (same process
        group): wait for it to stop, then re-raise."""
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(f"$ asv {' '.join(args)}\n")
            proc = subprocess.Popen([sys.executable, "-m", "asv", *args], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace")
            try:
                for line in proc.stdout:
                    log.write(line)
                    if self.verbose:
                        print(line, end="", flush=True)
                    elif progress is not None:
                        progress.feed(line)
            except KeyboardInterrupt:
                proc.wait()
                raise
            status = proc.wait()
        if progress is not None and not self.verbose:
            progress.finish()
        return status
