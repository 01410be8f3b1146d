"""Guards around the asv results directory, so that no run ever loses or rewrites results.

asv trusts its caller: it writes a machine name as a path, `asv publish` empties whatever
directory it is given for HTML, and two runs into one directory overwrite each other's files.
Every opbench command that writes goes through these checks first.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

from accuracy.core.errors import OpbenchError

LOCK_FILE = ".opbench.lock"  # not .json: asv and the report loader read every .json they find
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,99}")
ASV_HTML_MARKERS = ("index.json", "asv.js")  # files `asv publish` writes: the directory is its own


def check_name(flag: str, value: str) -> str:
    """A machine or environment name becomes a directory or file name: one plain path component."""
    if not NAME_PATTERN.fullmatch(value) or ".." in value:
        raise OpbenchError(
            f"{flag} {value!r} is not a valid name: use letters, digits and _ . + = - (at most 100, "
            "starting with a letter or digit, no '..')"
        )
    return value


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output_dir(flag: str, path: Path, results: Path, *, owned_marker: tuple[str, ...] = ()) -> Path:
    """Refuse an output directory that is, contains or lies inside the results directory.

    With `owned_marker`, an existing non-empty directory must also hold those files (it was made
    by the tool that is about to empty it), else it is refused rather than emptied.
    """
    out, res = path.resolve(), results.resolve()
    if _is_within(out, res) or _is_within(res, out):
        raise OpbenchError(f"{flag} {path} overlaps the results directory {results}; choose a directory outside it")
    if out.exists() and not out.is_dir():
        raise OpbenchError(f"{flag} {path} is a file, not a directory")
    if owned_marker and out.is_dir() and any(out.iterdir()) and not all((out / m).exists() for m in owned_marker):
        raise OpbenchError(f"{flag} {path} is a directory asv did not create and would be emptied; choose another")
    return path


def check_output_file(flag: str, path: Path, results: Path) -> Path:
    """A file written by a command: never inside the results directory, never a directory."""
    out, res = path.resolve(), results.resolve()
    if _is_within(out, res):
        raise OpbenchError(f"{flag} {path} is inside the results directory {results}; choose a path outside it")
    if out.is_dir():
        raise OpbenchError(f"{flag} {path} is a directory; give a file name")
    return path


def check_results_dir(results: Path) -> Path:
    if results.exists() and not results.is_dir():
        raise OpbenchError(f"--results {results} is a file, not a results directory")
    return results


@contextmanager
def results_lock(results: Path):
    """Hold an exclusive lock on the results directory; a second writer is refused (exit 2).

    flock is released by the kernel when the process dies, so a killed run never leaves a
    stale lock behind. Refusing rather than waiting: a queued run would silently start
    minutes later, against results the user did not expect.
    """
    check_results_dir(results)
    results.mkdir(parents=True, exist_ok=True)
    path = results / LOCK_FILE
    with open(path, "a+", encoding="ascii") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise OpbenchError(
                f"{results} is in use by another opbench run ({holder}); wait for it to finish"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader sees the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def merge_benchmarks_json(staged: Path, target: Path) -> str:
    """asv rewrites benchmarks.json with only the benchmarks a run selected; keep the others."""
    merged = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {}
    merged.update(json.loads(staged.read_text(encoding="utf-8")))
    return json.dumps(merged, indent=4, sort_keys=True)
