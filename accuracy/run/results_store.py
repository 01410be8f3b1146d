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
import shutil
from contextlib import contextmanager
from pathlib import Path

from accuracy.core.errors import OpbenchError
from accuracy.core.files import os_error_line, refuse_symlink, remove_stale_temps, replace_atomic
from accuracy.core.fingerprints import PENDING_SUFFIX, fingerprint_path
from accuracy.run.progress import LOG_DIR

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
    """A file written by a command: never inside the results directory, never a directory, never
    through a symbolic link (checked before the command's work, so nothing is lost to it)."""
    refuse_symlink(path)
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


def _open_lock(results: Path) -> int:
    """The lock file, never through a symbolic link (O_NOFOLLOW): a link planted there would
    otherwise have its target truncated; a read-only or foreign directory is one line."""
    path = results / LOCK_FILE
    try:
        results.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OpbenchError(f"{path} is a symbolic link; opbench does not write through links (remove it)") from None
        raise OpbenchError(
            f"cannot lock the results directory: {os_error_line('write', path, exc)}; choose a writable --results"
        ) from None


@contextmanager
def results_lock(results: Path):
    """Hold an exclusive lock on the results directory; a second writer is refused (exit 2).

    flock is released by the kernel when the process dies, so a killed run never leaves a
    stale lock behind. Refusing rather than waiting: a queued run would silently start
    minutes later, against results the user did not expect.
    """
    check_results_dir(results)
    with os.fdopen(_open_lock(results), "r+", encoding="ascii") as handle:
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


def check_no_links(results: Path, machine: str | None = None) -> None:
    """What a run writes inside the results directory must be in it: a symbolic link for the log
    folder, benchmarks.json, a machine folder or a file in it would send writes elsewhere."""
    refuse_symlink(results / LOG_DIR)
    refuse_symlink(results / "benchmarks.json")
    if machine is None:
        return
    folder = results / machine
    refuse_symlink(folder)
    if folder.is_dir():
        for path in folder.iterdir():
            refuse_symlink(path)


def merge_benchmarks_json(staged: Path, target: Path) -> tuple[str, list[str]]:
    """asv rewrites benchmarks.json with only the benchmarks a run selected; keep the others.

    A file that cannot be read never costs the batch that has just finished: an unreadable
    results/benchmarks.json is kept aside under a new name and rebuilt from this run's (asv
    rebuilds it the same way on its next run); an unreadable staged one keeps the old one.
    Returns the merged text and the warnings to show.
    """
    warnings = []
    merged = read_benchmarks_json(target) if target.is_file() else {}
    if merged is None:
        aside = target.with_name(f"{target.name}.unreadable-{os.getpid()}")
        replace_atomic(target, aside)
        warnings.append(f"{target} was unreadable (kept as {aside.name}); rebuilt from this run's benchmarks")
        merged = {}
    staged_data = read_benchmarks_json(staged)
    if staged_data is None:
        warnings.append(f"asv's benchmarks.json for this batch was unreadable; {target} keeps its old entries")
        staged_data = {}
    merged.update(staged_data)
    return json.dumps(merged, indent=4, sort_keys=True), warnings


def read_benchmarks_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recover_interrupted_saves(results: Path, staging: Path | None = None) -> list[str]:
    """Finish or undo what a killed run left half-saved (call under the results lock).

    A pending fingerprint whose recorded digest matches its results file was saved with it:
    it is renamed into place; any other was saved with results that never landed: removed.
    Temporary files of interrupted writes and staging directories of killed runs (all but this
    run's `staging`) are deleted.
    Returns one line per repair, for the user to see.
    """
    lines = []
    for folder in [results, *(p for p in results.iterdir() if p.is_dir() and not p.is_symlink())]:
        for pending in folder.glob(f"*{PENDING_SUFFIX}"):
            result_file = folder / (pending.name.removesuffix(PENDING_SUFFIX).removesuffix(".fingerprint") + ".json")
            if result_file.is_file() and fingerprint_path(result_file) == pending:
                replace_atomic(pending, pending.with_name(pending.name.removesuffix(PENDING_SUFFIX)))
                lines.append(f"completed the save of {result_file} that an interrupted run left half-done")
            else:
                pending.unlink()
        removed = remove_stale_temps(folder)
        if removed:
            lines.append(f"removed {len(removed)} temporary files an interrupted run left in {folder}")
    for old in results.resolve().parent.glob(f".{results.name}-staging-*"):
        if old.is_dir() and not old.is_symlink() and old != staging:
            shutil.rmtree(old, ignore_errors=True)
            lines.append(f"removed {old}, left by a killed run")
    return lines
