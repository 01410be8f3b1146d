"""Bad input to every subcommand: exit 2, one line, no traceback, and not one byte written.

Each case runs against a workspace holding a results directory, a report and an asv HTML
directory; every file is checksummed before and after, so a case that loses, rewrites or
creates anything fails even if its message is right.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_main, start_opbench

from accuracy.cli import main as cli
from accuracy.core.errors import OpbenchError
from accuracy.core.files import OWNED_MARK
from accuracy.core.threads import all_cores
from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file
from accuracy.run.results_store import results_lock

ROOT = Path(__file__).resolve().parents[2]
BENCH = SyntheticBenchmark(
    "bench_products.Dot.time_op", "time", "seconds", ("impl_dtype", "size"), (("numpy:np.dot@float32",), (4096,))
)
COMMIT = hashlib.sha1(b"bad input").hexdigest()
DATE = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)


def _workspace(root: Path) -> dict[str, Path]:
    """results/ with one machine, reports/latest/, an asv-made html/, a foreign dir and a file."""
    results = root / "results"
    write_benchmarks(results, [BENCH])
    write_machine(results, "box")
    result_file = write_result_file(
        results, "box", "py3.11", COMMIT, DATE, [BENCH], lambda b, c: [1e-4, 1.1e-4], {"blas": []}
    )
    (root / "reports" / "latest").mkdir(parents=True)
    (root / "reports" / "latest" / "index.html").write_text("<p>an earlier report</p>")
    (root / "reports" / "latest" / OWNED_MARK).write_text("")
    (root / "thesis" / "latest").mkdir(parents=True)  # a user's directory where a report could go
    (root / "thesis" / "latest" / "chapter1.tex").write_text("\\chapter{Results}")
    (root / "html").mkdir()
    for marker in ("index.json", "asv.js", "index.html"):
        (root / "html" / marker).write_text("{}")
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("not asv's")
    (root / "a_file").write_text("not a directory")
    (root / "array.json").write_text("[1, 2]")
    bad = root / "bad"  # results whose only file cannot be used
    write_benchmarks(bad / "date", [BENCH])
    write_machine(bad / "date", "box")
    write_benchmarks(bad / "null", [BENCH])
    write_machine(bad / "null", "box")
    data = json.loads(result_file.read_text())
    (bad / "date" / "box" / result_file.name).write_text(json.dumps(data | {"date": "yesterday"}))
    (bad / "null" / "box" / result_file.name).write_text(json.dumps(data | {"commit_hash": None, "env_name": None}))
    _case_files(root / "case")
    return {"results": results, "file": result_file}


def _case_files(folder: Path) -> None:
    """Inputs and outputs for `opbench check`, good and bad (exp and matmul at size 8)."""
    folder.mkdir()
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    np.savez(folder / "exp.npz", x=x)
    np.save(folder / "exp_out.npy", np.exp(x))
    np.save(folder / "exp_out64.npy", np.exp(x.astype(np.float64)))
    np.save(folder / "short.npy", np.exp(x[:7]))
    np.save(folder / "int.npy", np.arange(8, dtype=np.int32))
    np.save(folder / "one_array.npy", x)
    np.savez(folder / "two_outputs.npz", a=np.exp(x), b=np.exp(x))
    np.savez(folder / "extra.npz", x=x, y=x)
    np.savez(folder / "int_inputs.npz", x=np.arange(8, dtype=np.int64))
    np.savez(folder / "wide.npz", x=np.linspace(-2, 2, 8) + 1e-12)  # float64 values no float32 holds
    np.savez(folder / "empty.npz", a=np.ones((0, 8), np.float32), b=np.ones((8, 8), np.float32))
    np.save(folder / "empty_out.npy", np.ones((0, 8), np.float32))
    np.savez(folder / "matmul_shapes.npz", a=np.ones((8, 8), np.float32), b=np.ones((5, 3), np.float32))
    np.savez(folder / "std_rows_of_1.npz", x=np.ones((4, 1), np.float32))
    np.save(folder / "std_rows_of_1_out.npy", np.zeros(4, np.float32))
    _huge_declared_files(folder)
    (folder / "garbage.npz").write_bytes(b"PK\x03\x04 not really a zip")
    (folder / "garbage.npy").write_bytes(b"not numpy")


def _huge_declared_files(folder: Path) -> None:
    """Files of a few hundred bytes whose headers declare terabytes: refused from the headers,
    so nothing is decompressed or allocated (issue 22 #15)."""
    import io
    import struct
    import zipfile

    header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)}
    with open(folder / "huge.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
    member = io.BytesIO()
    np.lib.format.write_array_header_2_0(member, header)
    with zipfile.ZipFile(folder / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", member.getvalue())
    tensors = json.dumps({"x": {"dtype": "F32", "shape": [1 << 29], "data_offsets": [0, 1 << 31]}}).encode()
    (folder / "huge.safetensors").write_bytes(struct.pack("<Q", len(tensors)) + tensors)
    for name, header in (("list", [1, 2]), ("shape", {"x": {"dtype": "F32", "shape": "8", "data_offsets": [0, 32]}})):
        text = json.dumps(header).encode()
        (folder / f"{name}.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + bytes(32))


def _checksums(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


R = "{root}/results"
SMALL_CNN = "accuracy.workflows.model.zoo:small_cnn"
# (args, what the one line must say); {root} is the workspace
CASES = [
    # explain
    (["explain", "nosuchop"], "unknown op"),
    (["explain", "linear", "--dtype", "float8"], "unknown dtype"),
    (["explain", "linear", "--threads", "0"], "--threads must be at least 1"),
    (["explain", "matmul", "--threads", str(all_cores() + 2)], f"maximum {all_cores()}"),
    (["explain", "matmul", "--threads", "64"], f"maximum {all_cores()}"),
    (["explain", "matmul", "--size", "200000"], "GB for inputs and references"),
    (["explain", "matmul", "--size", "20000"], "GB for inputs and references"),
    (["explain", "softmax", "--size", "10000000000"], "GB for inputs and references"),
    (["explain", "linear", "--size", "0"], "size must be a positive integer"),
    (["explain", "erf", "--dtype", "float16", "--size", "-3"], "size must be a positive integer"),
    (["explain", "solve", "--condition", "nosuch"], "has no condition"),
    (["explain", "exp", "--dtype", "bfloat16", "--condition", "ill"], "has no condition"),
    # scan and selftest
    (["scan", "nosuchop"], "unknown op"),
    (["scan", "exp", "--dtype", "float8"], "unknown dtype"),
    (["scan", "exp", "--impl", "nosuch"], "has no implementation"),
    (["scan", "exp", "--sample", "0"], "--sample must be at least 1"),
    (["selftest", "nosuchop"], "unknown op"),
    (["selftest", "exp", "--dtype", "float8"], "unknown dtype"),
    # run: names
    (["run", "--results", R, "--machine", "../../../../x"], "not a valid name"),
    (["run", "--results", R, "--machine", "a/b"], "not a valid name"),
    (["run", "--results", R, "--machine", ".hidden"], "not a valid name"),
    (["run", "--results", R, "--machine", ""], "not a valid name"),
    (["run", "--results", R, "--env", "lower=1"], "--env wants KEY=VALUE"),
    (["run", "--results", R, "--env", "NOVALUE"], "--env wants KEY=VALUE"),
    (["run", "--results", R, "--env", "X/../=1"], "--env wants KEY=VALUE"),
    # run: outputs never in or around results, never a directory asv did not make
    (["run", "--results", R, "--html", R], "overlaps the results directory"),
    (["run", "--results", R, "--html", R + "/box"], "overlaps the results directory"),
    (["run", "--results", R, "--html", "{root}"], "overlaps the results directory"),
    (["run", "--results", R, "--html", "{root}/mine"], "asv did not create"),
    (["run", "--results", R, "--html", "{root}/a_file"], "is a file"),
    (["run", "--results", R, "--report", R], "overlaps the results directory"),
    (["run", "--results", "{root}/a_file"], "is a file, not a results directory"),
    # run: configuration and selection
    (["run", "--results", R, "--config", "{root}/array.json"], "not an object of settings"),
    (["run", "--results", R, "--config", "{root}/missing.json"], "asv config not found"),
    (["run", "--results", R, "--bench", "("], "not a valid regular expression"),
    (
        ["run", "--results", R, "--commits", "nosuchref..HEAD", "--config", str(ROOT / "asv.conf.json")],
        "is not a commit range",
    ),
    # compare
    (["compare", "box", "box", "--results", R, "--csv", R + "/box/" + "{result}"], "inside the results directory"),
    (["compare", "box", "box", "--results", R, "--csv", R + "/new.csv"], "inside the results directory"),
    (["compare", "box", "box", "--results", R, "--csv", "{root}/mine"], "is a directory"),
    (["compare", "box", "nosuch", "--results", R], "nosuch"),
    (["compare", "box", "box", "--results", "{root}/a_file"], "--results {root}/a_file is a file, not a results"),
    (["compare", "box", "box", "--results", "{root}/bad/date"], "no asv results"),
    # report
    (["report", "--results", "{root}/a_file"], "--results {root}/a_file is a file, not a results directory"),
    (["report", "--results", "{root}/nowhere"], "does not exist"),
    (["report", "--results", "{root}/bad/date"], "no asv results"),
    (["report", "--results", "{root}/bad/null"], "no asv results"),
    (["report", "--results", R, "--out", R], "overlaps the results directory"),
    (["report", "--results", R, "--out", "{root}", "--name", "results"], "overlaps the results directory"),
    (["report", "--results", R, "--name", "../escape"], "not a valid name"),
    # issue 40 item 1: never replace a directory opbench did not create
    (["report", "--results", R, "--out", "{root}", "--name", "thesis"], "opbench did not create"),
    (["report", "--results", R, "--out", "{root}/thesis"], "--out/--name {root}/thesis/latest is a directory opbench"),
    (["run", "--results", R, "--report", "{root}/thesis"], "--report {root}/thesis/latest is a directory opbench"),
    # issue 40 item 10: a threshold that is no number, or no ratio above 1
    (["report", "--results", R, "--threshold", "nan"], "--threshold nan must be a finite number greater than 1"),
    (["report", "--results", R, "--threshold", "inf"], "--threshold inf must be a finite number greater than 1"),
    (["report", "--results", R, "--threshold", "-2"], "--threshold -2.0 must be a finite number greater than 1"),
    # check: files
    (["check", "exp", "--inputs", "{root}/case/nofile.npz", "--output", "a={root}/case/exp_out.npy"], "no such file"),
    (
        ["check", "exp", "--inputs", "{root}/case/garbage.npz", "--output", "a={root}/case/exp_out.npy"],
        "cannot read it as .npz",
    ),
    (["check", "exp", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/garbage.npy"], "not a .npy file"),
    (
        ["check", "exp", "--inputs", "{root}/mine", "--output", "a={root}/case/exp_out.npy"],
        "mine: a directory, not a file",
    ),
    (
        ["check", "exp", "--inputs", "{root}/mine/notes.txt", "--output", "a={root}/case/exp_out.npy"],
        "unknown file type .txt",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/one_array.npy", "--output", "a={root}/case/exp_out.npy"],
        "inputs need names",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/two_outputs.npz"],
        "holds 2 arrays",
    ),
    # check: names, shapes, dtypes
    (
        ["check", "matmul", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/exp_out.npy"],
        "missing a, b; unexpected x",
    ),
    (["check", "exp", "--inputs", "{root}/case/extra.npz", "--output", "a={root}/case/exp_out.npy"], "unexpected y"),
    (
        ["check", "matmul", "--inputs", "{root}/case/matmul_shapes.npz", "--output", "a={root}/case/exp_out.npy"],
        "cannot take inputs of shapes",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/short.npy"],
        "output has shape (7,)",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/int.npy"],
        "unsupported dtype int32",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/int_inputs.npz", "--output", "a={root}/case/exp_out.npy"],
        "unsupported dtype int64",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/wide.npz", "--output", "a={root}/case/exp_out.npy"],
        "not float32 numbers",
    ),
    (
        [
            "check",
            "exp",
            "--inputs",
            "{root}/case/exp.npz",
            "--output",
            "a={root}/case/exp_out.npy",
            "--output",
            "b={root}/case/exp_out64.npy",
        ],
        "outputs in several dtypes",
    ),
    (
        ["check", "matmul", "--inputs", "{root}/case/empty.npz", "--output", "a={root}/case/empty_out.npy"],
        "no elements in input 'a', {root}/case/empty_out.npy; nothing to judge",
    ),
    # check: arguments
    (["check", "nosuchop", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/exp_out.npy"], "unknown op"),
    (["check", "exp", "--inputs", "{root}/case/exp.npz"], "give at least one output"),
    (["check", "exp", "--inputs", "{root}/case/exp.npz", "--output", "{root}/case/exp_out.npy"], "expected LABEL=FILE"),
    (
        [
            "check",
            "exp",
            "--inputs",
            "{root}/case/exp.npz",
            "--output",
            "a={root}/case/exp_out.npy",
            "--output",
            "a={root}/case/exp_out.npy",
        ],
        "share a label",
    ),
    (
        [
            "check",
            "exp",
            "--inputs",
            "{root}/case/exp.npz",
            "--output",
            "a={root}/case/exp_out.npy",
            "--contract",
            "-1",
        ],
        "--contract must be",
    ),
    (["check", "--inputs", "{root}/case/exp.npz"], "give an op or --fn"),
    (["check", "exp", "--fn", "math:exp", "--inputs", "{root}/case/exp.npz"], "not both"),
    (["check", "--fn", "nocolon", "--inputs", "{root}/case/exp.npz"], "expected MODULE:FUNCTION"),
    (["check", "--fn", "opbench_no_such_module:f", "--inputs", "{root}/case/exp.npz"], "cannot import"),
    (["check", "--fn", "json:no_such_function", "--inputs", "{root}/case/exp.npz"], "has no function"),
    (["check", "--fn", "operator:neg", "--inputs", "{root}/case/exp.npz"], "fails on"),  # positional only
    (
        ["check", "--fn", "numpy:exp", "--inputs", "{root}/case/exp.npz", "--contract", "2"],
        "--contract applies to registry ops",
    ),
    # inputs
    (["inputs", "exp", "--save", R + "/x.npz", "--results", R], "inside the results directory"),
    (["inputs", "exp", "--save", R + "/box/x.npz", "--results", R], "inside the results directory"),
    (["inputs", "exp", "--save", "{root}/bad/date/x.npz"], "inside the results directory"),
    (["inputs", "exp", "--save", "{root}/x.txt"], "cannot save .txt"),
    (["inputs", "exp", "--save", "{root}/mine"], "cannot save a file without extension"),
    (["inputs", "exp", "--save", "{root}/nodir/x.npz"], "does not exist"),
    (["inputs", "exp", "--save", "{root}/case/exp.npz"], "already exists"),
    (["inputs", "exp", "--dtype", "bfloat16", "--save", "{root}/x.npz"], "has no bfloat16"),
    (["inputs", "nosuchop", "--save", "{root}/x.npz"], "unknown op"),
    (["inputs", "exp", "--dtype", "float8", "--save", "{root}/x.npz"], "unknown dtype"),
    (["inputs", "exp", "--size", "0", "--save", "{root}/x.npz"], "size must be a positive integer"),
    (["inputs", "matmul", "--size", "200000", "--save", "{root}/x.npz"], "GB for inputs"),
    (["inputs", "solve", "--condition", "nosuch", "--save", "{root}/x.npz"], "has no condition"),
    # issue 22 (paths-a): a path or label holding a newline or an ANSI escape stays on its one line
    (
        ["check", "exp", "--inputs", "{root}/case/no\nfile\x1b[2J.npz", "--output", "a={root}/case/exp_out.npy"],
        "{root}/case/no\\nfile\\x1b[2J.npz: no such file",
    ),
    (["compare", "box", "box", "--results", R], "are the same result set (1 results file)"),
    (
        ["check", "exp", "--inputs", "{root}/case/bomb.npz", "--output", "a={root}/case/exp_out.npy"],
        "bomb.npz: declares 4.1e+03 GiB of array data (x shape (1099511627776,) float32), more than the 1 GiB",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/exp.npz", "--output", "a={root}/case/huge.npy"],
        "huge.npy: declares 4.1e+03 GiB of array data (shape (1099511627776,) float32), more than the 1 GiB",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/huge.safetensors", "--output", "a={root}/case/exp_out.npy"],
        "huge.safetensors: declares 2 GiB of array data (x shape (536870912,) F32), more than the 1 GiB",
    ),
    (["explain", "std", "--size", "1"], "--size 1 is too small: std needs rows of at least 2 elements"),
    (["explain", "var", "--size", "1"], "--size 1 is too small: var needs rows of at least 2 elements"),
    (
        [
            "check",
            "std",
            "--inputs",
            "{root}/case/std_rows_of_1.npz",
            "--output",
            "a={root}/case/std_rows_of_1_out.npy",
        ],
        "std_rows_of_1.npz: std needs rows of at least 2 elements, input 'x' has 1",
    ),
    (["scan", "exp", "--dtype", "float64", "--sample", "99999999999999"], "choose a smaller --sample"),
    # issue 40 items 16 and 20: generated model inputs are checked before anything is allocated
    (["model", SMALL_CNN, "--inputs", "x=100000000000x8"], "GB (half the memory available now); choose smaller"),
    (["model", SMALL_CNN, "--inputs", "x=" + "x".join(["1"] * 65)], "x has 65 dimensions, more than the 32 opbench"),
    (
        ["model", SMALL_CNN, "--inputs", "x=2x3x8x8y"],
        "'x=2x3x8x8y' is neither an existing file nor a shape NAME=D1xD2x",
    ),
    (["model", SMALL_CNN, "--inputs", "x=2x3x8x8,x=3x3x8x8"], "x is given twice; give each input once"),
    # issue 40 item 20: a malformed .safetensors header says what the format wants
    (
        ["check", "exp", "--inputs", "{root}/case/list.safetensors", "--output", "a={root}/case/exp_out.npy"],
        "list.safetensors: malformed .safetensors header: a JSON list, not a JSON object of NAME: {{",
    ),
    (
        ["check", "exp", "--inputs", "{root}/case/shape.safetensors", "--output", "a={root}/case/exp_out.npy"],
        "shape.safetensors: malformed .safetensors header: tensor 'x' is {{'dtype': 'F32', 'shape': '8'",
    ),
]


# Paths of the reliability probe (issue 22 items 11, 16, 18): a workspace prepared by a function
# (real symbolic links; a full or read-only disk simulated by failing the system call).
def _link(name: str, to: str):
    def prepare(root: Path, monkeypatch) -> None:
        if name != ".opbench.lock":
            (root / "results" / ".opbench.lock").write_text("")  # as any earlier run leaves it
        (root / "results" / name).symlink_to(root / to)

    return prepare


def _fail(target: str, name: str, code: int, when=lambda *a, **k: True):
    """Make `target`'s `name` raise OSError(code) when `when(*args)` (then call through)."""

    def prepare(root: Path, monkeypatch) -> None:
        import importlib

        (root / "results" / ".opbench.lock").write_text("")
        owner = importlib.import_module(target)
        real = getattr(owner, name)

        def failing(*args, **kwargs):
            if when(*args, **kwargs):
                raise OSError(code, os.strerror(code))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, failing)

    return prepare


def _full_disk_at_index_html(root: Path, monkeypatch) -> None:
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if self.name == "index.html" and "an earlier report" not in data:
            real(self, data[: len(data) // 2], *args, **kwargs)  # the disk fills half-way through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def _outside_link(name: str, to: str):
    """A symbolic link `name` in the workspace (beside results/) pointing at `to` (which may not exist)."""

    def prepare(root: Path, monkeypatch) -> None:
        (root / name).symlink_to(root / to)

    return prepare


HISTORY = ["--commits", "HEAD^!", "--config", str(ROOT / "asv.conf.json"), "--no-report"]
PROBE_CASES = [
    # item 11: symbolic links inside the results directory are refused, never followed
    (["run", "--results", R], "symbolic link", _link(".opbench.lock", "a_file")),
    (["run", "--results", R], "symbolic link", _link("logs", "mine")),
    (["run", "--results", R, "--machine", "linked", *HISTORY], "symbolic link", _link("linked", "mine")),
    (["run", "--results", R, "--machine", "box", *HISTORY], "symbolic link", _link("box/extra.json", "a_file")),
    # item 16: a read-only results directory; a full disk while staging
    (
        ["run", "--results", R],
        "cannot lock the results directory: cannot write {root}/results/.opbench.lock: Read-only file system",
        _fail("os", "open", errno.EROFS, lambda path, *a, **k: str(path).endswith(".opbench.lock")),
    ),
    (
        ["run", "--results", R, "--machine", "box", *HISTORY],
        "No space left on device; nothing was run and {root}/results is unchanged",
        _fail("shutil", "copytree", errno.ENOSPC),
    ),
    # item 16: `inputs --save` onto a full or read-only disk leaves no truncated file
    (["inputs", "exp", "--save", "{root}/new.npz"], "new.npz: No space left on device", _fail("numpy", "savez", 28)),
    (
        ["inputs", "exp", "--save", "{root}/new.npz"],
        "cannot write {root}/new.npz: Read-only file system",
        _fail("tempfile", "mkstemp", errno.EROFS),
    ),
    # item 18: `report` onto a full disk keeps the old report whole
    (
        ["report", "--results", R, "--out", "{root}/reports"],
        "cannot write {root}/reports/latest: No space left on device",
        _full_disk_at_index_html,
    ),
    # issue 40 items 2 and 3: outputs never go through a link, dangling or not
    (
        ["compare", "box", "box", "--results", R, "--csv", "{root}/linked.csv"],
        "{root}/linked.csv is a symbolic link",
        _outside_link("linked.csv", "a_file"),
    ),
    (
        ["compare", "box", "box", "--results", R, "--csv", "{root}/linked.csv"],
        "{root}/linked.csv is a symbolic link",
        _outside_link("linked.csv", "nowhere.csv"),
    ),
]
TABLE = [(args, needle, None) for args, needle in CASES] + PROBE_CASES


@pytest.mark.parametrize("args,needle,prepare", TABLE, ids=[" ".join(a)[:60] for a, _, _ in TABLE])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, args, needle, prepare):
    paths = _workspace(tmp_path)
    if prepare is not None:
        prepare(tmp_path, monkeypatch)
    before = _checksums(tmp_path)
    argv = [a.format(root=tmp_path, result=paths["file"].name) for a in args]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opbench: error:"), err
    assert needle.format(root=tmp_path) in lines[0], lines[0]
    assert "Traceback" not in out + err
    assert _checksums(tmp_path) == before


def test_a_second_run_on_locked_results_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """Refused on the lock, without waiting for its holder, and before fingerprinting the environment
    or starting asv (both start a process)."""
    paths = _workspace(tmp_path)
    with results_lock(paths["results"]):
        before = _checksums(tmp_path)
        flock = fcntl.flock

        def flock_without_waiting(fd, operation):
            assert operation & fcntl.LOCK_NB or operation == fcntl.LOCK_UN, "a blocking lock waits for its holder"
            return flock(fd, operation)

        def no_process(*args, **kwargs):
            raise AssertionError(f"a process was started for refused work: {args}")

        monkeypatch.setattr(fcntl, "flock", flock_without_waiting)
        monkeypatch.setattr(subprocess, "Popen", no_process)
        code = cli.main(["run", "--results", str(paths["results"]), "--bench", "Dot", "--no-report"])
        monkeypatch.undo()
        after = _checksums(tmp_path)  # while still held: the holder clears its pid on release
    err = capsys.readouterr().err
    assert code == 2 and f"in use by another opbench run (pid {os.getpid()})" in err, err
    assert after == before


@pytest.mark.slow  # end to end: opbench in its own process
def test_opbench_blas_without_a_path_is_refused_not_loaded_as_a_fake_provider():
    proc = start_opbench("info", env={"OPBENCH_BLAS": ":"})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, out + err
    assert err.strip().splitlines() == [
        "opbench: error: OPBENCH_BLAS entry ':' names no library file; write /path/lib.so[:name]"
    ]


@pytest.mark.slow  # end to end: opbench in its own process
def test_list_json_into_a_closed_pipe_ends_quietly():
    proc = subprocess.run(
        f"{sys.executable} -m accuracy list --json | head -c 100",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert len(proc.stdout) == 100
    assert proc.stderr == ""


def test_ctrl_c_while_importing_prints_one_line(monkeypatch, capsys):
    """The imports (torch, pandas) take seconds: an early Ctrl-C lands there, not in a command."""

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["explain", "matmul"]) == 2
    assert capsys.readouterr().err == "opbench: error: interrupted\n"


# a Ctrl-C that lands in code an extension runs through CPython's PyRun_String (pybind11's py::exec)
PYRUN_INTERRUPTED = """
import ctypes, sys
from accuracy.cli import main as cli

def interrupted():
    run = ctypes.pythonapi.PyRun_String
    run.restype = ctypes.py_object
    run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]
    run(b"raise KeyboardInterrupt", 257, {}, {})

cli.build_parser = interrupted
sys.exit(cli.main(["list"]))
"""


@pytest.mark.slow
def test_ctrl_c_in_an_extensions_python_code_still_exits_2_not_by_the_signal(tmp_path):
    """Seen once under load: explain's one line, then exit status -2. CPython marked the interrupt
    unhandled as it left PyRun_String, and at exit (of `python -m`, as `opbench` runs) killed
    itself with SIGINT."""
    (tmp_path / "interrupted_cli.py").write_text(PYRUN_INTERRUPTED)
    command = [sys.executable, "-m", "interrupted_cli"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "opbench: error: interrupted\n")


@pytest.mark.slow
def test_ctrl_c_in_explain_prints_one_line():
    """Ctrl-C once explain is at work: past interpreter start-up (Python's own, with its own
    message), at the first framework library it loads (torch's, ~0.6 CPU-s in), not after a fixed
    5 s sleep that spent 5 CPU-s computing and, on a busy machine, could still be starting up."""
    proc = start_opbench("explain", "matmul", "--size", "1500")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if "/libtorch_cpu.so" in Path(f"/proc/{proc.pid}/maps").read_text():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "explain ended before it loaded torch's library"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, out + err
    assert err.strip().splitlines() == ["opbench: error: interrupted"]


def test_labels_with_a_newline_or_ansi_escapes_are_shown_escaped(tmp_path, capsys):
    """Issue 22 #19: `--output "x\\nFAKE within rounding=..."` forged a table row and sent raw
    escapes to the terminal; every user-supplied label now prints on its own row, escaped."""
    _case_files(tmp_path / "case")
    forged = "x\nFAKE  within rounding  0.5\x1b[31m"
    code = cli.main(
        [
            "check",
            "exp",
            "--inputs",
            str(tmp_path / "case" / "exp.npz"),
            "--output",
            f"{forged}={tmp_path / 'case' / 'exp_out.npy'}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "\x1b" not in out and "\nFAKE" not in out
    rows = [line for line in out.splitlines() if "FAKE" in line]
    assert len(rows) == 2 and all(line.lstrip().startswith("x\\nFAKE  within rounding  0.5\\x1b[31m") for line in rows)


def _edited(results: Path, edit) -> None:
    """`edit(data)` applied to the workspace's one results file, as a hand edit or a foreign tool would."""
    (path,) = (results / "box").glob("*-py3.11.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _text_value(data):
    for row in data["results"].values():
        row[0] = ["not a number"]


def _text_started_at(data):
    for row in data["results"].values():
        row[data["result_columns"].index("started_at")] = "yesterday"


def _cut_benchmarks_json(results: Path) -> None:
    text = (results / "benchmarks.json").read_text()
    (results / "benchmarks.json").write_text(text[: len(text) // 2])


@pytest.mark.parametrize(
    "damage,named",
    [
        (lambda r: _edited(r, _text_value), "holds text where asv stores numbers"),
        (lambda r: _edited(r, _text_started_at), "holds text where asv stores numbers"),
        (_cut_benchmarks_json, "benchmarks.json: unreadable"),
    ],
    ids=["text value", "text started_at", "truncated benchmarks.json"],
)
def test_report_on_damaged_results_warns_naming_the_file(tmp_path, capsys, damage, named):
    """Issue 22 #16: text in a results file (DateParseError) and a cut-off benchmarks.json
    (KeyError) were tracebacks in `report`; now a warning names the file and the report is written."""
    results = _workspace(tmp_path)["results"]
    damage(results)
    code = cli.main(["report", "--results", str(results), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
    assert any(
        line.startswith("opbench: warning: ") and named in line and str(results) in line for line in err.splitlines()
    ), err
    assert (tmp_path / "out" / "latest" / "index.html").is_file()


def test_a_2_gib_output_file_is_refused_before_numpy_reads_it(tmp_path, capsys, monkeypatch):
    """Issue 22 #15: a real 2 GiB .npy (sparse here: no disk, no memory) reached 2.27 GB RSS before."""
    _case_files(tmp_path / "case")
    big = tmp_path / "case" / "big.npy"
    with open(big, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (1 << 29,)})
        f.truncate(f.tell() + (1 << 31))

    load = np.load

    def refuse(file, *args, **kwargs):
        assert Path(file) != big, "np.load was called on a file over the limit"
        return load(file, *args, **kwargs)

    monkeypatch.setattr(np, "load", refuse)
    code = cli.main(["check", "exp", "--inputs", str(tmp_path / "case" / "exp.npz"), "--output", f"a={big}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "declares 2 GiB of array data (shape (536870912,) float32), more than the 1 GiB" in err


def test_compare_csv_onto_a_full_disk_keeps_the_previous_file(tmp_path, capsys, monkeypatch):
    """Issue 40 item 2: `to_csv` straight onto the path left a 4,096-byte cut-off file."""
    results = tmp_path / "results"
    write_benchmarks(results, [BENCH])
    for machine in ("box", "other"):
        write_machine(results, machine)
        write_result_file(results, machine, "py3.11", COMMIT, DATE, [BENCH], lambda b, c: [1e-4, 1.1e-4], {})
    previous = tmp_path / "cmp.csv"
    previous.write_text("op,benchmark_class,the previous comparison\n")

    def full_disk(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    done = run_main(capsys, "compare", "box", "other", "--results", results, "--csv", previous)
    assert (
        done.returncode == 2
        and done.stderr.strip() == f"opbench: error: cannot write {previous}: No space left on device"
    )
    assert previous.read_text() == "op,benchmark_class,the previous comparison\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.csv", "results"]


# issue 40 items 13, 14, 16 and 18: one damaged file of a fleet is a warning naming it; the rest is reported
def _fleet(root: Path) -> tuple[Path, Path]:
    """results/ with machines box (sound) and wreck; returns (results, wreck's results file)."""
    results = root / "results"
    write_benchmarks(results, [BENCH])
    for machine in ("box", "wreck"):
        write_machine(results, machine)
        wreck = write_result_file(results, machine, "py3.11", COMMIT, DATE, [BENCH], lambda b, c: [1e-4, 1.1e-4], {})
    return results, wreck


def _replace_by_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _edit_file(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _huge_grid(data: dict) -> None:
    """8 parameter lists of 100 values in a few KB: 10^16 combinations."""
    for row in data["results"].values():
        row[data["result_columns"].index("params")] = [[repr(i) for i in range(100)]] * 8


def _values(value: float):
    def edit(data: dict) -> None:
        for row in data["results"].values():
            row[0] = [value]

    return edit


NESTED = "[" * 200_000
FLEET_DAMAGE = [
    ("value 1e308", lambda wreck: _edit_file(wreck, _values(1e308)), None),
    ("date 1e300", lambda wreck: _edit_file(wreck, lambda d: d.update(date=1e300)), "outside the years 1677 to 2262"),
    ("nested results", lambda wreck: wreck.write_text(NESTED), "{wreck}: skipped, unreadable results file"),
    (
        "nested benchmarks.json",
        lambda wreck: (wreck.parents[1] / "benchmarks.json").write_text(NESTED),
        "benchmarks.json: unreadable",
    ),
    (
        "nested fingerprint",
        lambda wreck: wreck.with_suffix(".fingerprint").write_text(NESTED),
        "{wreck_fp}: not JSON opbench can read (nested too deeply); fingerprint ignored",
    ),
    ("FIFO results", lambda wreck: _replace_by_fifo(wreck), "{wreck} is not a regular file"),
    (
        "FIFO machine.json",
        lambda wreck: _replace_by_fifo(wreck.parent / "machine.json"),
        "machine.json is not a regular",
    ),
    (
        "FIFO benchmarks.json",
        lambda wreck: _replace_by_fifo(wreck.parents[1] / "benchmarks.json"),
        "benchmarks.json is not a regular file",
    ),
    (
        "FIFO fingerprint",
        lambda wreck: _replace_by_fifo(wreck.with_suffix(".fingerprint")),
        "{wreck_fp} is not a regular",
    ),
    ("link to /dev/zero", lambda wreck: (wreck.unlink(), wreck.symlink_to("/dev/zero")), "{wreck} is not a regular"),
    (
        "10^16 combinations",
        lambda wreck: _edit_file(wreck, _huge_grid),
        "1e+16 parameter combinations (at most 1,000,000",
    ),
]


class Hung(BaseException):
    """Not an OSError (as TimeoutError is), which the loader would take for an unreadable file."""


@pytest.fixture
def no_hang():
    """A FIFO blocked the report for ever: fail after 60 s instead of hanging the test run."""

    def timeout(_signum, _frame):
        raise Hung("opbench hung")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("damage,named", [d[1:] for d in FLEET_DAMAGE], ids=[d[0] for d in FLEET_DAMAGE])
def test_one_damaged_file_never_costs_the_fleet_report(tmp_path, capsys, no_hang, damage, named):
    results, wreck = _fleet(tmp_path)
    damage(wreck)
    done = run_main(capsys, "report", "--results", results, "--out", tmp_path / "out", "--max-plots", "1")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    if named is not None:
        needle = named.format(wreck=wreck, wreck_fp=wreck.with_suffix(".fingerprint"))
        warnings = [line for line in done.stderr.splitlines() if line.startswith("opbench: warning: ")]
        assert any(needle in line for line in warnings), done.stderr
    page = (tmp_path / "out" / "latest" / "index.html").read_text()
    assert "box" in page


# issue 40 item 4: caches whose entries are trusted are never in the current directory or others'
def test_an_empty_xdg_cache_home_is_treated_as_unset(tmp_path, monkeypatch):
    from accuracy.backends.libtorch import LibTorchBackend
    from accuracy.reference.cache import cache_dir

    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.delenv("OPBENCH_CACHE")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "opbench" / "refs"
    build = LibTorchBackend().build_directory
    assert build.is_relative_to(tmp_path / "home" / ".cache" / "torch_extensions"), build
    assert list((tmp_path / "cwd").iterdir()) == []


@pytest.mark.parametrize("variable", ["OPBENCH_CACHE", "OPBENCH_CONVERSION_CACHE", "TORCH_EXTENSIONS_DIR"])
def test_a_cache_others_can_write_to_is_refused(tmp_path, monkeypatch, variable):
    from accuracy.backends.libtorch import LibTorchBackend
    from accuracy.reference.cache import cache_dir

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv(variable, str(shared))
    with pytest.raises(OpbenchError, match=f"{shared} is writable by others \\(mode drwxrwxrwx\\)"):
        cache_dir(variable) if variable != "TORCH_EXTENSIONS_DIR" else LibTorchBackend().build_directory


@pytest.mark.parametrize("made", ["shared", "a file"])
def test_an_executorch_port_with_a_conversion_cache_it_cannot_trust_or_use_says_so_once(
    tmp_path, capsys, monkeypatch, made
):
    """Shared: the port is absent with the refusal (each unit was "cannot convert it alone"). A file:
    one warning, and the port converts afresh."""
    pytest.importorskip("executorch")
    place = tmp_path / "conversions"
    if made == "shared":
        place.mkdir(mode=0o777)
        place.chmod(0o777)
    else:
        place.write_text("")
    monkeypatch.setenv("OPBENCH_CONVERSION_CACHE", str(place))
    done = run_main(
        capsys,
        "model",
        "accuracy.workflows.model.zoo:small_cnn",
        "--inputs",
        "x=2x3x8x8",
        "--port",
        "executorch-portable",
    )
    if made == "shared":
        assert done.returncode == 1 and "nothing was compared (absent: executorch-portable)" in done.stdout
        absent = f"executorch-portable: absent (the conversion cache (OPBENCH_CONVERSION_CACHE) {place} is writable"
        assert absent in done.stdout
    else:
        assert done.returncode == 0 and "every compared layer within rounding (8 of 8 units compared)" in done.stdout
        assert done.stderr == (
            f"opbench: warning: the conversion cache (OPBENCH_CONVERSION_CACHE) {place} cannot be used (a file, not a "
            "directory); running without it (slower)\n"
        )


def test_explain_with_a_shared_reference_cache_is_one_line(tmp_path, capsys, monkeypatch):
    shared = tmp_path / "refs"
    shared.mkdir()
    shared.chmod(0o775)
    monkeypatch.setenv("OPBENCH_CACHE", str(shared))
    done = run_main(capsys, "explain", "exp", "--size", "16")
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"opbench: error: the reference cache {shared} is writable by others")


# issue 40 items 15 and 19: a --dask address that is no Dask scheduler ends in one line, in seconds
def _serve(reply: bytes | None) -> int:
    """A TCP service on a free port that accepts, reads, and answers `reply` (None: never answers)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    held = []

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            held.append(conn)
            if reply is not None:
                conn.recv(4096)
                conn.sendall(reply)

    threading.Thread(target=accept, daemon=True).start()
    return server.getsockname()[1]


@pytest.mark.parametrize(
    "address,message",
    [
        ("ucx://127.0.0.1:8786", "expected tcp://HOST:PORT (a running Dask scheduler) or local:N; tls://, ucx://"),
        ("tls://127.0.0.1:8786", "expected tcp://HOST:PORT (a running Dask scheduler) or local:N; tls://, ucx://"),
        ("silent", "answered nothing in 1 s (a scheduler greets at once); is it a Dask scheduler?"),
        ("http", "answered nothing in 1 s (a scheduler greets at once); is it a Dask scheduler?"),
    ],
)
def test_a_dask_address_that_is_no_scheduler_is_one_line(capsys, monkeypatch, no_hang, address, message):
    from accuracy.workflows import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)  # a silent server is waited out
    if address in ("silent", "http"):
        address = f"tcp://127.0.0.1:{_serve(None if address == 'silent' else b'HTTP/1.1 400 Bad Request' * 8)}"
    done = run_main(capsys, "scan", "exp", "--dtype", "float16", "--dask", address)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert message in done.stderr


def test_stdout_on_a_full_device_is_one_line(capsys, monkeypatch):
    """Issue 40 item 19: `opbench list > /dev/full` was an OSError traceback."""
    with open("/dev/full", "w", encoding="utf-8") as full:  # a device, not a path
        monkeypatch.setattr(sys, "stdout", full)
        code = cli.main(["list"])
    assert code == 2
    assert capsys.readouterr().err == "opbench: error: cannot write the output: No space left on device\n"


def test_a_label_the_output_encoding_lacks_is_shown_escaped(tmp_path, capsys, monkeypatch):
    """Issue 40 item 19: PYTHONIOENCODING=latin-1 and a euro sign in a label was a UnicodeEncodeError."""
    import io

    _case_files(tmp_path / "case")
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding="latin-1"))
    code = cli.main(
        ["check", "exp", "--inputs", f"{tmp_path}/case/exp.npz", "--output", f"\u20ac={tmp_path}/case/exp_out.npy"]
    )
    sys.stdout.flush()
    assert code == 0, capsys.readouterr().err
    assert b"\\u20ac" in out.getvalue()


def test_a_read_only_home_gets_no_matplotlib_warning(tmp_path, capsys, caplog, monkeypatch):
    """Issue 40 item 20: matplotlib's two-line warning about its config directory reached the user."""
    import matplotlib

    assert cli.main(["list"]) == 0
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    not_a_directory = tmp_path / "home-file"
    not_a_directory.write_text("")
    with caplog.at_level(logging.WARNING):
        matplotlib._get_config_or_cache_dir(lambda: str(not_a_directory))  # as with a read-only HOME
    assert [r.getMessage() for r in caplog.records if r.name.startswith("matplotlib")] == []


def test_arrays_that_would_not_fit_in_memory_are_refused_before_loading(tmp_path, monkeypatch, capsys):
    """#40 item 16: 240 MB of inputs took over 4 GB. A file's declared data times the measured
    peak per byte (ARRAY_MEMORY_FACTOR) is held to half the memory available, from its headers."""
    from accuracy.core import limits
    from accuracy.workflows.array_files import ARRAY_MEMORY_FACTOR

    x = np.linspace(-2, 2, 1 << 18, dtype=np.float32)  # 1 MiB
    np.savez(tmp_path / "in.npz", x=x)
    np.save(tmp_path / "out.npy", np.exp(x))
    argv = ["check", "exp", "--inputs", str(tmp_path / "in.npz"), "--output", f"np={tmp_path / 'out.npy'}"]
    needed = ARRAY_MEMORY_FACTOR * x.nbytes
    monkeypatch.setattr(limits, "available_memory", lambda: needed)  # a budget of half that
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"{tmp_path / 'in.npz'}: its 1 MiB of array data" in captured.err
    assert f"need about {needed / (1 << 20):.3g} MiB of memory to judge" in captured.err
    monkeypatch.setattr(limits, "available_memory", lambda: 3 * needed)  # enough for each file
    status = cli.main(argv)
    assert status in (0, 1), capsys.readouterr().err


def test_a_model_whose_activations_would_not_fit_in_memory_is_refused_before_judging(monkeypatch, capsys):
    """The model's peak follows its weights and its activations (every layer's inputs and output),
    not its inputs: checked after the reference run, before any port runs or any unit is judged."""
    import torch

    from accuracy.core import limits
    from accuracy.workflows.model import memory
    from accuracy.workflows.model.ports import default_ports
    from accuracy.workflows.model.trace import record
    from accuracy.workflows.model.zoo import small_cnn

    monkeypatch.setattr(limits, "available_memory", lambda: 200_000)  # the 6 KB input fits, the run does not
    assert cli.main(["model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", "x=2x3x8x8"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    # float32 inputs and outputs of its 8 layers on 2 images of 3x8x8: the image, 14 maps of 4x4x4, 10 logits
    held = 4 * (384 + 14 * 128 + 10)
    assert f"its activations on x=2x3x8x8 ({held / (1 << 10):.3g} KiB)" in captured.err
    model = small_cnn()
    calls, _ = record(model, {"x": torch.zeros(2, 3, 8, 8)})
    needed = memory.needed_bytes(memory.model_bytes(model), memory.call_bytes(calls), default_ports(gpu=False))
    assert f"need about {needed / (1 << 30):.3g} GiB of memory" in captured.err
    # the estimate is an upper one: all the memory is the budget
    assert "more than the budget of 195 KiB (the memory available now)" in captured.err
