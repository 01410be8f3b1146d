"""One atomic write for every file opbench saves, and a results save that a kill or an I/O error
cannot leave half-done (issue 22 items 11, 12, 14, 16, 18; issue 23 "one atomic write")."""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.core import files
from accuracy.core.errors import OpbenchError
from accuracy.core.files import atomic_directory, remove_stale_temps, write_atomic
from accuracy.core.fingerprints import RESULTS_DIGEST, results_digest
from accuracy.report.fingerprint import read_fingerprint
from accuracy.report.load import load_results
from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file
from accuracy.run import driver, stack_fingerprint
from accuracy.run.progress import AsvLog
from accuracy.run.results_store import merge_benchmarks_json, recover_interrupted_saves

BENCH = SyntheticBenchmark("bench_x.X.track_v", "track", "ulp", ("n",), ((1,),))
COMMIT = hashlib.sha1(b"pair").hexdigest()
DATE = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)
OLD_STACK = {"blas": [{"internal_api": "openblas", "version": "0.3.1"}]}
NEW_STACK = {"blas": [{"internal_api": "mkl", "version": "2025.1"}]}


def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# --- the helper ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(old=st.binary(max_size=64), new=st.binary(max_size=64))
def test_write_atomic_replaces_whole_and_leaves_no_temporary_file(tmp_path_factory, old, new):
    folder = tmp_path_factory.mktemp("w")
    path = folder / "f.bin"
    path.write_bytes(old)
    write_atomic(path, new)
    assert path.read_bytes() == new
    assert sorted(p.name for p in folder.iterdir()) == ["f.bin"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "x.npz"
    path.write_bytes(b"old")

    def half(handle):
        handle.write(b"half a file")
        _enospc()

    with pytest.raises(OpbenchError, match=r"cannot write .*x.npz: No space left on device"):
        write_atomic(path, half)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.npz"]


def test_an_interrupted_write_removes_its_temporary_too(tmp_path):
    def interrupted(_handle):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "x", interrupted)
    assert list(tmp_path.iterdir()) == []


def test_write_atomic_never_writes_through_a_symbolic_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(OpbenchError, match="symbolic link"):
        write_atomic(tmp_path / "link", "overwritten")
    assert victim.read_text() == "keep me"


def test_atomic_directory_swaps_whole_or_not_at_all(tmp_path):
    target = tmp_path / "latest"
    target.mkdir()
    (target / "index.html").write_text("old page")
    (target / "old.csv").write_text("old")
    (target / files.OWNED_MARK).write_text("")
    with pytest.raises(OpbenchError, match="No space left"), atomic_directory(target) as building:
        (building / "index.html").write_text("new page, cut o")
        _enospc()
    assert {p.name: p.read_text() for p in target.iterdir()} == {
        "index.html": "old page",
        "old.csv": "old",
        files.OWNED_MARK: "",
    }
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]
    with atomic_directory(target) as building:
        (building / "index.html").write_text("new page")
    assert {p.name for p in target.iterdir()} == {"index.html", files.OWNED_MARK}
    assert (target / "index.html").read_text() == "new page"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]


@pytest.mark.parametrize("user_files", [["chapter1.tex"], ["index.html"], ["index.html", "notes.txt"]])
def test_atomic_directory_never_replaces_a_directory_opbench_did_not_make(tmp_path, user_files):
    """Issue 40 item 1: `report --out userdir --name thesis` deleted userdir/thesis/chapter1.tex."""
    target = tmp_path / "thesis"
    target.mkdir()
    for name in user_files:
        (target / name).write_text("a user's work")
    refused = pytest.raises(OpbenchError, match="is a directory opbench did not create")
    with refused, atomic_directory(target) as building:
        (building / "index.html").write_text("a report")
    assert {p.name: p.read_text() for p in target.iterdir()} == dict.fromkeys(user_files, "a user's work")
    assert [p.name for p in tmp_path.iterdir()] == ["thesis"]


@pytest.mark.parametrize("before", [None, [], list(files.LEGACY_REPORT_FILES)])
def test_atomic_directory_replaces_its_own_new_empty_or_earlier_report(tmp_path, before):
    """A new or empty directory, one it marked and a report from before the mark are opbench's."""
    target = tmp_path / "latest"
    if before is not None:
        target.mkdir()
        for name in before:
            (target / name).write_text("an earlier report")
    for page in ("first", "second"):
        with atomic_directory(target) as building:
            (building / "index.html").write_text(page)
        assert (target / "index.html").read_text() == page and (target / files.OWNED_MARK).is_file()


def test_write_atomic_refuses_a_dangling_link_and_creates_nothing_at_its_target(tmp_path):
    """Issue 40 item 3: `--html` at a dangling link created the file it pointed to."""
    (tmp_path / "page.html").symlink_to(tmp_path / "elsewhere.html")
    with pytest.raises(OpbenchError, match="symbolic link"):
        write_atomic(tmp_path / "page.html", "<p>")
    assert not (tmp_path / "elsewhere.html").exists()


def test_every_writer_uses_the_one_helper():
    """Issue 23: atomic writes were coded three times; no module renames a temporary file itself."""
    root = Path(__file__).resolve().parents[2]
    own = [
        str(p.relative_to(root))
        for folder in ("accuracy", "benchmarks")
        for p in (root / folder).rglob("*.py")
        if p != root / "accuracy/core/files.py"
        and any(s in p.read_text() for s in ("os.replace(", "mkstemp(", ".replace(path)", "tmp.rename("))
    ]
    assert own == []


def test_saved_inputs_are_never_left_truncated(tmp_path, monkeypatch):
    """`inputs --save` onto a full disk: one line, exit 2, no 8 KB stub of an .npz."""
    import numpy as np

    from accuracy.cli import main as cli

    real = np.savez

    def full_disk(handle, **arrays):
        real(handle, **arrays)  # the bytes are written, then the disk fills before they are safe
        _enospc()

    monkeypatch.setattr(np, "savez", full_disk)
    assert cli.main(["inputs", "exp", "--save", str(tmp_path / "x.npz")]) == 2
    assert list(tmp_path.iterdir()) == []


# --- the results save: a results file and its fingerprint as a pair --------------------------------


def _saved_once(tmp_path: Path) -> tuple[Path, Path, Path]:
    """results/box with one results file and its fingerprint (the old stack); a staged new save."""
    results = tmp_path / "results"
    write_benchmarks(results, [BENCH])
    write_machine(results, "box")
    old = write_result_file(results, "box", "py", COMMIT, DATE, [BENCH], lambda b, c: 1.0, OLD_STACK)
    staging = tmp_path / "staging"
    write_benchmarks(staging, [BENCH])
    write_machine(staging, "box")
    new = write_result_file(staging, "box", "py", COMMIT, DATE, [BENCH], lambda b, c: 2.0)
    return results, old, new


def _stack_and_value(results: Path) -> tuple[dict, float]:
    frame = load_results(results).frame
    [path] = [p for p in (results / "box").glob("*.json") if p.name != "machine.json"]
    return read_fingerprint(path, []).get("blas"), float(frame["value"].iloc[0])


def _commit(results: Path, new: Path) -> None:
    driver._commit(new.parents[1], results, "box", [new], {new: json.dumps(NEW_STACK)})


def test_commit_saves_results_and_fingerprint_as_a_pair(tmp_path):
    results, _, new = _saved_once(tmp_path)
    _commit(results, new)
    assert _stack_and_value(results) == ("mkl 2025.1", 2.0)
    assert sorted(p.name for p in (results / "box").iterdir()) == sorted(
        ["machine.json", new.name, new.with_suffix(".fingerprint").name]
    )


def test_an_io_error_on_the_results_rename_leaves_the_old_pair(tmp_path, monkeypatch):
    """Item 14: EIO on the rename was a traceback, with the new fingerprint beside the old results."""
    results, _, new = _saved_once(tmp_path)
    real = os.replace

    def eio_on_results(src, dst):
        if str(dst).endswith(new.name):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", eio_on_results)
    with pytest.raises(OpbenchError, match=f"cannot write .*{new.name}: Input/output error"):
        _commit(results, new)
    monkeypatch.setattr(os, "replace", real)
    assert _stack_and_value(results) == ("openblas 0.3.1", 1.0)
    recover_interrupted_saves(results)
    assert _stack_and_value(results) == ("openblas 0.3.1", 1.0)
    assert not [p for p in (results / "box").iterdir() if "pending" in p.name or files.TEMP_MARK in p.name]


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler catches it."""


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_kill_between_any_two_renames_is_read_consistently_and_repaired(tmp_path, monkeypatch, step):
    """Killed before the n-th rename: the loader pairs each results file with its own fingerprint,
    and the next run (under the lock) completes or undoes the save."""
    results, _, new = _saved_once(tmp_path)
    real, calls = os.replace, []

    def killed_at_step(src, dst):
        if Path(dst).parent == results / "box" and Path(dst).name != "machine.json":
            calls.append(dst)
            if len(calls) == step:
                raise Killed
        return real(src, dst)

    monkeypatch.setattr(os, "replace", killed_at_step)
    with pytest.raises(Killed):
        _commit(results, new)
    monkeypatch.setattr(os, "replace", real)
    expected = ("openblas 0.3.1", 1.0) if step <= 2 else ("mkl 2025.1", 2.0)
    assert _stack_and_value(results) == expected
    (results / "box" / f".{new.name}{files.TEMP_MARK}killed").write_text("{")  # what a kill mid-write leaves
    lines = recover_interrupted_saves(results)
    assert _stack_and_value(results) == expected
    assert sorted(p.name for p in (results / "box").iterdir()) == sorted(
        ["machine.json", new.name, new.with_suffix(".fingerprint").name]
    )
    assert any("temporary files" in line for line in lines)


def test_a_truncated_benchmarks_json_keeps_the_batch(tmp_path):
    """Item 16: json.loads of a truncated results/benchmarks.json threw the finished batch away."""
    results, _, new = _saved_once(tmp_path)
    (results / "benchmarks.json").write_text('{"bench_x.X.track_v": {"code"')
    merged, warnings = merge_benchmarks_json(new.parents[1] / "benchmarks.json", results / "benchmarks.json")
    assert "bench_x.X.track_v" in json.loads(merged)
    [line] = warnings
    assert "was unreadable" in line and "benchmarks.json.unreadable-" in line
    assert [p.name for p in results.glob("benchmarks.json.unreadable-*")]


def test_remove_stale_temps_takes_only_temporary_names(tmp_path):
    (tmp_path / ".a.json.tmp-x1").write_text("")
    (tmp_path / ".latest.tmp-y").mkdir()
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / ".opbench.lock").write_text("")
    assert len(remove_stale_temps(tmp_path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".opbench.lock", "a.json"]


# --- subprocesses never import from the current directory (item 12) ------------------------------


@pytest.mark.slow
def test_an_accuracy_py_in_the_current_directory_does_not_replace_the_fingerprint(tmp_path, monkeypatch):
    (tmp_path / "accuracy.py").write_text("raise SystemExit('not opbench')\n")
    monkeypatch.chdir(tmp_path)
    fingerprint = stack_fingerprint.take_fingerprint(sys.executable, dict(os.environ))
    assert "error" not in fingerprint and fingerprint["blas"]
    # the full stack, as a run records it: the frameworks' runtime details, not only their versions
    assert fingerprint["torch"]["cpu_capability"] and "runtime" not in fingerprint["torch"]
    assert "onednn_enabled" in fingerprint["frameworks"]["tensorflow"]


@pytest.mark.slow
def test_a_fingerprint_that_cannot_be_taken_is_an_error_not_a_digest():
    env = dict(os.environ, OPBENCH_BLAS=":")  # `opbench info` refuses it with exit 2
    with pytest.raises(OpbenchError, match=r"cannot fingerprint .*OPBENCH_BLAS entry ':' names no library"):
        stack_fingerprint.take_fingerprint(sys.executable, env)


@pytest.mark.slow  # end to end: a fresh Python process
def test_an_asv_py_in_the_current_directory_is_never_run(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "asv.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    log = AsvLog(tmp_path / "logs" / "asv.log", verbose=False)
    assert log.call(["--version"], dict(os.environ)) == 0
    assert not marker.exists()
    assert "asv 0.6" in (tmp_path / "logs" / "asv.log").read_text()


@pytest.mark.slow  # end to end: a fresh Python process
def test_safe_path_keeps_pythonpath():
    """-P, not -I: developers and asv's own environments rely on PYTHONPATH."""
    proc = subprocess.run(
        [sys.executable, *stack_fingerprint.SAFE_PATH, "-c", "import sys; print(sys.path)"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH="/opbench-marker"),
        check=True,
    )
    assert "/opbench-marker" in proc.stdout


def test_the_machine_is_recorded_with_arch_cpu_os_and_ram(tmp_path, monkeypatch):
    """Issue 22 item 8: `asv machine --yes --machine NAME` recorded the name alone: [none] in asv's sidebar."""
    from asv.machine import MachineCollection

    monkeypatch.setenv("HOME", str(tmp_path))
    driver.register_machine("box-1234abcd")
    info = MachineCollection.load("box-1234abcd")
    assert info["machine"] == "box-1234abcd"
    assert all(info[field] for field in ("arch", "cpu", "os", "ram", "num_cpu")), info
    assert info["num_cpu"] == str(os.cpu_count())


def test_every_reader_of_a_fingerprint_checks_it_belongs_to_its_results(tmp_path):
    """Issue 38 item 4: the stack difference and the CPU peak read the fingerprint without the
    results digest, so a fingerprint of another save (an interrupted run) was shown as this one's."""
    from accuracy.report.answers import _cpu
    from accuracy.report.stack import read_stack

    _, old, _ = _saved_once(tmp_path)
    fingerprint = old.with_suffix(".fingerprint")
    data = json.loads(fingerprint.read_text()) | {"cpu": {"mhz": 3000.0}, "cpu_count": 2}
    fingerprint.write_text(json.dumps(data | {RESULTS_DIGEST: results_digest(old.read_bytes())}))
    assert read_stack(old) is not None and _cpu(old) is not None
    fingerprint.write_text(json.dumps(data | {RESULTS_DIGEST: results_digest(b"another save")}))
    assert read_stack(old) is None and _cpu(old) is None
    warnings: list[str] = []
    assert read_fingerprint(old, warnings) == {}
    assert warnings == [
        f"{fingerprint}: the fingerprint of another save of {old.name} (an interrupted run); fingerprint ignored"
    ]


def test_run_needs_nothing_from_the_report():
    """Issue 38 item 4: run/ imported report/ for the fingerprint helpers; they are in core now."""
    import ast

    root = Path(__file__).resolve().parents[2] / "accuracy" / "run"
    imported = {
        f"{path.name}: {name}"
        for path in root.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        for name in (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])]
        )
        if isinstance(node, (ast.Import, ast.ImportFrom)) and name.startswith("accuracy.report")
    }
    assert imported == set()


# --- a file that appears during the run (issue 57, item 2) ---------------------------------------


@pytest.mark.parametrize("hard_links", [True, False], ids=["link", "no-hard-links"])
def test_a_file_that_appears_during_the_write_is_kept_not_replaced(tmp_path, monkeypatch, hard_links):
    """The model page was checked absent before the run, then drawn and renamed over whatever was
    there: a file the user made meanwhile was lost (exit 0)."""
    path = tmp_path / "page.html"

    def drawn(handle):
        path.write_text("the user's own file")  # appears while opbench draws its page
        handle.write(b"<html>opbench's page</html>")

    if not hard_links:  # a file system without hard links: the O_EXCL claim of the name instead
        monkeypatch.setattr(files.os, "link", lambda *a: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
    with pytest.raises(OpbenchError, match="a file appeared there during the run; it is kept, not overwritten"):
        write_atomic(path, drawn, replace=False)
    assert path.read_text() == "the user's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]
    fresh = tmp_path / "fresh.html"
    write_atomic(fresh, b"new", replace=False)
    assert fresh.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["fresh.html", "page.html"]
