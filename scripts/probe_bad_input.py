"""The bad-input probe (issue 57): opbench's commands run as a new user would run them, as
subprocesses, on bad inputs, each outcome classified.

    nice -n 5 .venv/bin/python scripts/probe_bad_input.py [--only REGEX] [--json FILE] [--jobs N]

Outcomes: CLEAN (exit 0 or 1 with an answer on stdout), RIGHT (exit 2 with one line,
`opbench: error: ...`), TRACEBACK (a Python traceback on stdout or stderr), HANG (no exit within
the case's time), LOSS (a file that was there before the run changed or vanished), SECURITY (a
data file ran code, or a raw control byte reached the terminal), WRONG (anything else: exit 2
with more than one line, another exit status, an answer missing). Each case runs in a fresh
temporary directory holding a tiny model module and good files to break; the tally is in
docs/bad-input.md. Not part of the test suite (minutes); tests/cli/test_bad_input_probe.py runs a
few cases."""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

OUTCOMES = ("CLEAN", "RIGHT", "TRACEBACK", "HANG", "LOSS", "SECURITY", "WRONG")
MARKER = "RAN_CODE"  # a data file that runs code leaves this file behind
CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # raw control bytes (not \t \n \r)

MODELS = """
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 8)
        self.act = nn.GELU()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.act(self.up(x)))


def tiny():
    torch.manual_seed(0)
    return Tiny().eval()


def raises():
    raise RuntimeError("the factory failed")


def returns_list():
    return [tiny()]


def returns_none():
    return None


def sleeps():
    time.sleep(600)
    return tiny()


def naps():
    time.sleep(12)
    return tiny()


def exits():
    sys.exit(3)


class Raising(Tiny):
    def forward(self, x):
        raise ValueError("forward failed")


def forward_raises():
    return Raising().eval()


class Dict(Tiny):
    def forward(self, x):
        return {"y": super().forward(x), "n": 3}


def returns_dict():
    torch.manual_seed(0)
    return Dict().eval()


class NoneOut(Tiny):
    def forward(self, x):
        super().forward(x)
        return None


def returns_nothing():
    return NoneOut().eval()


def inf_weights():
    model = tiny()
    with torch.no_grad():
        model.up.weight[0, 0] = float("inf")
    return model


class InPlace(Tiny):
    def forward(self, x):
        x.mul_(2)
        return super().forward(x)


def in_place():
    torch.manual_seed(0)
    return InPlace().eval()


def escape_name():
    model = tiny()
    model.add_module("evil\\x1b[31m", nn.Identity())
    return model


class IntOut(Tiny):
    def forward(self, x):
        return (super().forward(x) * 100).long()


def int_output():
    torch.manual_seed(0)
    return IntOut().eval()


class Big(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 8)

    def forward(self, x):
        return self.up(x).expand(2**31, 8)


def huge_output():
    return Big().eval()


def not_callable():
    return 42


def page_appears():
    # the user's page appears while the model is built (after opbench checked that it was not there)
    with open("page.html", "w") as page:
        page.write("a user file\\n")
    return tiny()


class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.output = nn.Linear(16, 4)
        self.add_module("a#b", nn.GELU())
        self.add_module("c/d", nn.Tanh())

    def forward(self, x):
        return getattr(self, "c/d")(getattr(self, "a#b")(self.output(x)))


def named_output():
    torch.manual_seed(0)
    return Named().eval()


class HandNorm(nn.Module):
    # a BatchNorm by hand as a Keras port writes it, folded: moving statistics, eps in a config dict
    def __init__(self, channels, config):
        super().__init__()
        self.config = config
        self.weight, self.bias = nn.Parameter(torch.rand(channels)), nn.Parameter(torch.rand(channels))
        self.register_buffer("moving_mean", torch.randn(channels) / 4)
        self.register_buffer("moving_variance", 0.5 + torch.rand(channels))

    def forward(self, x):
        scale = torch.rsqrt(self.moving_variance + self.config["eps"]) * self.weight
        return x * scale[:, None, None] + (self.bias - self.moving_mean * scale)[:, None, None]


class HandPool(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 3, 2, 1)


class HandUp(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class HandCNN(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = HandNorm(4, config)
        self.pool = HandPool()
        self.up = HandUp()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.up(self.pool(torch.relu(self.norm(self.conv(x))))).mean((2, 3)))


def hand_cnn(config=None):
    torch.manual_seed(0)
    return HandCNN(config or {"eps": 1e-5}).eval()
"""


@dataclass
class Case:
    """One run: `argv` after `python -m accuracy`, files made by `setup(directory)` first."""

    name: str
    argv: list[str]
    setup: Callable[[Path], None] | None = None
    timeout: float = 90.0
    signal_after: float | None = None  # send `signal` this many seconds after the start
    signal: int = signal.SIGINT
    env: dict[str, str] = field(default_factory=dict)
    address_space: int | None = None  # ulimit -v, in bytes
    kept: tuple[str, ...] = ()  # files a user makes during the run: they must hold what the user wrote
    expect: str | None = None  # a CLEAN or RIGHT answer must hold this regex (stdout and stderr)...
    reject: str | None = None  # ... and must not hold this one


@dataclass
class Result:
    name: str
    outcome: str
    rc: int | None
    seconds: float
    detail: str
    output: str = ""  # the last of stdout and stderr, for a reader to judge a CLEAN answer


# --- files to break -------------------------------------------------------------------------------


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def good_files(d: Path) -> None:
    """A model module and good files for `check linear` and `model models:tiny`."""
    (d / "models.py").write_text(textwrap.dedent(MODELS))
    r = _rng()
    x, w, b = r.normal(size=(4, 8)).astype("f4"), r.normal(size=(3, 8)).astype("f4"), r.normal(size=3).astype("f4")
    np.savez(d / "lin.npz", x=x, W=w, b=b)
    np.save(d / "out.npy", (x @ w.T + b).astype("f4"))
    np.savez(d / "x.npz", x=r.normal(size=(2, 16)).astype("f4"))
    (d / "keep.txt").write_text("a user file\n")


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(data)


def _truncated(source: str, name: str, keep: float = 0.5) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        data = (d / source).read_bytes()
        (d / name).write_bytes(data[: int(len(data) * keep)])

    return setup


def _flipped(source: str, name: str) -> Callable[[Path], None]:
    """`source` with bytes in its middle overwritten."""

    def setup(d: Path) -> None:
        data = bytearray((d / source).read_bytes())
        middle = len(data) // 2
        data[middle : middle + 64] = bytes(range(64))
        (d / name).write_bytes(bytes(data))

    return setup


def _npy(name: str, array: np.ndarray) -> Callable[[Path], None]:
    return lambda d: np.save(d / name, array, allow_pickle=True)


def _npz(name: str, **arrays: np.ndarray) -> Callable[[Path], None]:
    return lambda d: np.savez(d / name, **arrays)


def _safetensors(name: str, header: bytes, payload: bytes = b"") -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(len(header).to_bytes(8, "little") + header + payload)


def _good_safetensors(d: Path) -> None:
    from safetensors.numpy import save_file

    save_file({"x": _rng().normal(size=(2, 16)).astype("f4")}, str(d / "x.safetensors"))


class _Runs:
    """A pickle that writes the marker file when unpickled."""

    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def _pickled_npy(d: Path) -> None:
    np.save(d / "evil.npy", np.array([_Runs()], dtype=object), allow_pickle=True)


def _pickled_npz(d: Path) -> None:
    np.savez(d / "evil.npz", x=np.array([_Runs()], dtype=object))


def _pickled_pt(d: Path) -> None:
    import pickle
    import zipfile

    # torch's zip layout with a data.pkl that runs code: torch.load(weights_only=False) would run it
    with zipfile.ZipFile(d / "evil.pt", "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"x": _Runs()}, protocol=2))
        z.writestr("evil/version", "3\n")


def _torch_pt(d: Path) -> None:
    import torch

    torch.save({"x": torch.randn(2, 16)}, d / "x.pt")


def _onnx(d: Path) -> None:
    import torch

    sys.path.insert(0, str(d))
    import models

    torch.onnx.export(models.tiny(), (torch.randn(2, 16),), str(d / "tiny.onnx"), input_names=["x"], dynamo=False)
    sys.path.remove(str(d))
    sys.modules.pop("models", None)


def _fifo(name: str) -> Callable[[Path], None]:
    return lambda d: os.mkfifo(d / name)


def _symlink(name: str, target: str) -> Callable[[Path], None]:
    return lambda d: os.symlink(target, d / name)


def _directory(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).mkdir()


def _made_by(code: str) -> Callable[[Path], None]:
    """Files made by `code`, run by this Python in the case's directory (the models importable):
    a port's activations file."""

    def setup(d: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(d)}
        subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=d, env=env, check=True, capture_output=True)

    return setup


RECORDED = """
import numpy as np
import torch

import models
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.trace import record

def save(port, inputs, name, change=None):
    with torch.no_grad():
        arrays = activations(*record(port, inputs))
    (change or (lambda a: a))(arrays)
    write_arrays(name, arrays)
"""
# the tiny model's own activations with one output element NaN
NAN_OUTPUT = (
    RECORDED
    + """
save(models.tiny(), dict(np.load("x.npz")), "nan.safetensors", lambda a: a["output"].__setitem__((0, 0), np.nan))
"""
)
# the hand-written CNN's port with its BatchNorm's eps 1e-3 (its config), on inputs of its own
HAND_PORT = (
    RECORDED
    + """
x = {"x": np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype("f4")}
np.savez("hx.npz", **x)
save(models.hand_cnn({"eps": 1e-3}), x, "hport.safetensors")
"""
)


def _module(name: str, text: str) -> Callable[[Path], None]:
    return lambda d: (d / f"{name}.py").write_text(textwrap.dedent(text))


def _results(d: Path) -> None:
    """A results directory as asv writes it (two machines, two commits each), through opbench's
    synthetic results (asv's own writer)."""
    import datetime

    from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file

    bench = SyntheticBenchmark("bench_x.Exp.track_max_ulp", "track", "ulp", ("dtype",), (("'float32'",),))
    results = d / "results"
    write_benchmarks(results, [bench])
    for machine in ("box", "other"):
        write_machine(results, machine)
        for day, commit in enumerate(("a" * 40, "b" * 40)):
            date = datetime.datetime(2026, 1, 1 + day, tzinfo=datetime.UTC)
            write_result_file(results, machine, "env", commit, date, [bench], lambda b, p, day=day: 0.5 + day)


def _damaged_results(how: str) -> Callable[[Path], None]:
    """Good results with one results file damaged: cut off, a FIFO, a link to /dev/zero, deep nesting."""

    def setup(d: Path) -> None:
        _results(d)
        victim = d / "results" / "box" / f"{'b' * 8}-env.json"
        data = victim.read_bytes()
        victim.unlink()
        if how == "cut off":
            victim.write_bytes(data[: len(data) // 2])
        elif how == "fifo":
            os.mkfifo(victim)
        elif how == "zero":
            os.symlink("/dev/zero", victim)
        else:
            victim.write_bytes(b"[" * 200_000)

    return setup


def _open_to_all(name: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        (d / name).mkdir()
        os.chmod(d / name, 0o777)

    return setup


def _steps(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for step in steps:
            step(d)

    return setup


# --- the cases ------------------------------------------------------------------------------------

HUGE_HEADER = b'{"a":{"dtype":"F32","shape":[100000,100000],"data_offsets":[0,40000000000]}}'
SHORT_HEADER = b'{"a":{"dtype":"F32","shape":[4,3],"data_offsets":[0,48]}}'
MODEL = ["model", "models:tiny", "--port", "threads:1"]
CHECK = ["check", "linear", "--inputs", "lin.npz"]


def cases() -> list[Case]:
    found: list[Case] = []

    def add(name: str, argv: list[str], setup: Callable[[Path], None] | None = None, **options) -> None:
        found.append(Case(name, argv, setup, **options))

    # check: files given as outputs and inputs
    add("check/good", [*CHECK, "--output", "a=out.npy"])
    add("check/output missing", [*CHECK, "--output", "a=nope.npy"])
    add("check/output a directory", [*CHECK, "--output", "a=dir"], _directory("dir"))
    add("check/output a FIFO", [*CHECK, "--output", "a=f.npy"], _fifo("f.npy"), timeout=30)
    add("check/output empty file", [*CHECK, "--output", "a=e.npy"], _write("e.npy", b""))
    add("check/output truncated .npy", [*CHECK, "--output", "a=t.npy"], _truncated("out.npy", "t.npy"))
    add("check/output corrupt .npy", [*CHECK, "--output", "a=c.npy"], _flipped("out.npy", "c.npy"))
    add("check/inputs truncated .npz", ["check", "linear", "--inputs", "t.npz", "--output", "a=out.npy"],
        _truncated("lin.npz", "t.npz"))  # fmt: skip
    add("check/inputs corrupt .npz", ["check", "linear", "--inputs", "c.npz", "--output", "a=out.npy"],
        _flipped("lin.npz", "c.npz"))  # fmt: skip
    add("check/inputs zip of text", ["check", "linear", "--inputs", "z.npz", "--output", "a=out.npy"],
        _write("z.npz", b"PK\x03\x04" + b"\x00" * 60))  # fmt: skip
    add("check/output pickled object .npy", [*CHECK, "--output", "a=evil.npy"], _pickled_npy)
    add("check/inputs pickled object .npz", ["check", "linear", "--inputs", "evil.npz", "--output", "a=out.npy"],
        _pickled_npz)  # fmt: skip
    add("check/output pickled .pt", [*CHECK, "--output", "a=evil.pt"], _pickled_pt)
    add("check/output NaN", [*CHECK, "--output", "a=n.npy"], _npy("n.npy", np.full((4, 3), np.nan, "f4")))
    add("check/output inf", [*CHECK, "--output", "a=i.npy"], _npy("i.npy", np.full((4, 3), np.inf, "f4")))
    add("check/output wrong shape", [*CHECK, "--output", "a=s.npy"], _npy("s.npy", np.zeros((5, 7), "f4")))
    add("check/output int64", [*CHECK, "--output", "a=d.npy"], _npy("d.npy", np.zeros((4, 3), "i8")))
    add("check/output complex", [*CHECK, "--output", "a=z.npy"], _npy("z.npy", np.zeros((4, 3), "c8")))
    add("check/output bool", [*CHECK, "--output", "a=b.npy"], _npy("b.npy", np.zeros((4, 3), bool)))
    add("check/output zero-size", [*CHECK, "--output", "a=zs.npy"], _npy("zs.npy", np.zeros((0, 3), "f4")))
    add("check/output 0-d", [*CHECK, "--output", "a=s0.npy"], _npy("s0.npy", np.float32(1.0)))
    add("check/inputs zero-size", ["check", "linear", "--inputs", "zi.npz", "--output", "a=zs.npy"],
        _steps(_npz("zi.npz", x=np.zeros((0, 8), "f4"), W=np.zeros((3, 8), "f4"), b=np.zeros(3, "f4")),
               _npy("zs.npy", np.zeros((0, 3), "f4"))))  # fmt: skip
    add("check/inputs NaN", ["check", "linear", "--inputs", "ni.npz", "--output", "a=out.npy"],
        _npz("ni.npz", x=np.full((4, 8), np.nan, "f4"), W=np.ones((3, 8), "f4"), b=np.ones(3, "f4")))  # fmt: skip
    add("check/inputs inf", ["check", "linear", "--inputs", "ii.npz", "--output", "a=out.npy"],
        _npz("ii.npz", x=np.full((4, 8), np.inf, "f4"), W=np.ones((3, 8), "f4"), b=np.ones(3, "f4")))  # fmt: skip
    add("check/inputs missing a name", ["check", "linear", "--inputs", "m.npz", "--output", "a=out.npy"],
        _npz("m.npz", x=np.zeros((4, 8), "f4")))  # fmt: skip
    add("check/inputs int dtype", ["check", "linear", "--inputs", "id.npz", "--output", "a=out.npy"],
        _npz("id.npz", x=np.ones((4, 8), "i4"), W=np.ones((3, 8), "i4"), b=np.ones(3, "i4")))  # fmt: skip
    add("check/output huge .npy header", [*CHECK, "--output", "a=h.npy"],
        _write("h.npy", b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }"
               .ljust(128 + 10 - 1, b" ") + b"\n"))  # fmt: skip
    add("check/output huge .safetensors", [*CHECK, "--output", "a=h.safetensors"],
        _safetensors("h.safetensors", HUGE_HEADER))  # fmt: skip
    add("check/output truncated .safetensors", [*CHECK, "--output", "a=t.safetensors"],
        _safetensors("t.safetensors", SHORT_HEADER, b"\x00" * 10))  # fmt: skip
    add("check/output .safetensors header not JSON", [*CHECK, "--output", "a=j.safetensors"],
        _safetensors("j.safetensors", b"{not json"))  # fmt: skip
    add("check/output .safetensors header length huge", [*CHECK, "--output", "a=l.safetensors"],
        _write("l.safetensors", (2**62).to_bytes(8, "little") + b"{}"))  # fmt: skip
    add("check/output symlink to /dev/zero", [*CHECK, "--output", "a=z.npy"], _symlink("z.npy", "/dev/zero"))
    add("check/output symlink to a good file", [*CHECK, "--output", "a=l.npy"], _symlink("l.npy", "out.npy"))
    add("check/output .txt", [*CHECK, "--output", "a=keep.txt"])
    add("check/output no label", [*CHECK, "--output", "out.npy"])
    add("check/label with an escape", [*CHECK, "--output", "a\x1b[31mred=out.npy"])
    add("check/unknown op", ["check", "nosuchop", "--inputs", "lin.npz", "--output", "a=out.npy"])
    add("check/contract nan", [*CHECK, "--output", "a=out.npy", "--contract", "nan"])
    add("check/contract negative", [*CHECK, "--output", "a=out.npy", "--contract", "-3"])
    # check --fn: user functions (they may run code: they are code)
    fn = ["check", "--inputs", "x.npz", "--output", "a=xo.npy", "--fn"]
    xo = _npy("xo.npy", np.zeros((2, 16), "f4"))
    add("check --fn/missing module", [*fn, "nosuch:f"], xo)
    add("check --fn/missing function", [*fn, "models:nosuch"], xo)
    add("check --fn/not callable", [*fn, "fns:VALUE"], _steps(xo, _module("fns", "VALUE = 3\n")))
    add("check --fn/raises", [*fn, "fns:f"], _steps(xo, _module("fns", "def f(x):\n    raise KeyError('k')\n")))
    add("check --fn/returns a string", [*fn, "fns:f"], _steps(xo, _module("fns", "def f(x):\n    return 'no'\n")))
    add("check --fn/returns None", [*fn, "fns:f"], _steps(xo, _module("fns", "def f(x):\n    return None\n")))
    add("check --fn/syntax error", [*fn, "fns:f"], _steps(xo, _module("fns", "def f(x)\n    return x\n")))
    add("check --fn/exits at import", [*fn, "fns:f"], _steps(xo, _module("fns", "import sys\nsys.exit(0)\n")))
    add("check --fn/imports a missing module", [*fn, "fns:f"], _steps(xo, _module("fns", "import nosuchthing\n")))
    add("check --fn/no colon", [*fn, "fns"], xo)
    # explain
    add("explain/unknown op", ["explain", "nosuchop"])
    add("explain/size 0", ["explain", "exp", "--size", "0"])
    add("explain/size negative", ["explain", "exp", "--size", "-5"])
    add("explain/size huge", ["explain", "exp", "--size", "1000000000000"])
    add("explain/size not a number", ["explain", "exp", "--size", "big"])
    add("explain/dtype unknown", ["explain", "exp", "--dtype", "float7"])
    add("explain/threads 0", ["explain", "exp", "--threads", "0"])
    add("explain/threads huge", ["explain", "exp", "--threads", "100000"])
    add("explain/condition nan", ["explain", "linear", "--condition", "nan"])
    add("explain/std of one", ["explain", "std", "--size", "1"])
    add("explain/cache home a file", ["explain", "exp", "--size", "64"], _write("cachefile", b"x"),
        env={"XDG_CACHE_HOME": "{dir}/cachefile", "OPBENCH_CACHE": ""}, expect="running without it")  # fmt: skip
    add("explain/cache writable by others", ["explain", "exp", "--size", "64"],
        _open_to_all("cache"), env={"OPBENCH_CACHE": "cache"})  # fmt: skip
    # inputs
    add("inputs/good", ["inputs", "exp", "--size", "64", "--save", "new.npz"])
    add("inputs/existing file", ["inputs", "exp", "--size", "64", "--save", "x.npz"])
    add("inputs/missing directory", ["inputs", "exp", "--size", "64", "--save", "no/such/x.npz"])
    add("inputs/parent is a file", ["inputs", "exp", "--size", "64", "--save", "keep.txt/x.npz"])
    add("inputs/into /proc", ["inputs", "exp", "--size", "64", "--save", "/proc/opbench-probe.npz"])
    add("inputs/symlink", ["inputs", "exp", "--size", "64", "--save", "l.npz"], _symlink("l.npz", "keep.txt"))
    add("inputs/symlink --force", ["inputs", "exp", "--size", "64", "--save", "l.npz", "--force"],
        _symlink("l.npz", "keep.txt"))  # fmt: skip
    add("inputs/dangling symlink", ["inputs", "exp", "--size", "64", "--save", "d.npz"], _symlink("d.npz", "gone"))
    add("inputs/a directory", ["inputs", "exp", "--size", "64", "--save", "dir"], _directory("dir"))
    add("inputs/.txt", ["inputs", "exp", "--size", "64", "--save", "x.txt"])
    add("inputs/size 0", ["inputs", "exp", "--size", "0", "--save", "z.npz"])
    # report and compare
    add("report/missing results", ["report", "--results", "nope", "--out", "rep"])
    add("report/results a file", ["report", "--results", "keep.txt", "--out", "rep"])
    add("report/empty results", ["report", "--results", "empty", "--out", "rep"], _directory("empty"))
    add("report/good", ["report", "--results", "results", "--out", "rep"], _results)
    for how in ("cut off", "fifo", "zero", "nested"):
        add(f"report/results file {how}", ["report", "--results", "results", "--out", "rep"], _damaged_results(how),
            timeout=60)  # fmt: skip
        add(f"compare/results file {how}", ["compare", "--results", "results", "box", "other"], _damaged_results(how),
            timeout=60)  # fmt: skip
    add("report/out under a file", ["report", "--results", "results", "--out", "keep.txt/rep"], _results)
    add("report/out into /proc", ["report", "--results", "results", "--out", "/proc/opbench-probe"], _results)
    add("report/out a user directory", ["report", "--results", "results", "--out", ".", "--name", "mine"],
        _steps(_results, _directory("mine"), lambda d: (d / "mine/notes.txt").write_text("mine\n")))  # fmt: skip
    add("report/out the results", ["report", "--results", "results", "--out", "results"], _results)
    add("report/max-plots negative", ["report", "--results", "results", "--max-plots", "-5"], _results)
    add("report/threshold nan", ["report", "--results", "results", "--threshold", "nan"], _results)
    add("compare/good", ["compare", "--results", "results", "box", "other"], _results)
    add("compare/missing sets", ["compare", "--results", "results", "a", "b"], _results)
    add("compare/same set", ["compare", "--results", "results", "box", "box"], _results)
    add("compare/csv a symlink", ["compare", "--results", "results", "box", "other", "--csv", "l.csv"],
        _steps(_results, _symlink("l.csv", "keep.txt")))  # fmt: skip
    add("compare/csv existing", ["compare", "--results", "results", "box", "other", "--csv", "keep.txt"], _results)
    add("compare/csv under a file", ["compare", "--results", "results", "box", "other", "--csv", "keep.txt/c.csv"],
        _results)  # fmt: skip
    add("compare/results missing", ["compare", "--results", "nope", "a", "b"])
    # model: factories, inputs, ports, files
    add("model/good", [*MODEL, "--inputs", "x=2x16"])
    add("model/missing module", ["model", "nosuch:tiny", "--inputs", "x=2x16"])
    add("model/no colon", ["model", "models", "--inputs", "x=2x16"])
    add("model/missing function", ["model", "models:nosuch", "--inputs", "x=2x16"])
    for factory in ("raises", "returns_list", "returns_none", "exits", "not_callable", "forward_raises",
                    "returns_dict", "returns_nothing", "int_output", "huge_output"):  # fmt: skip
        add(f"model/factory {factory}", ["model", f"models:{factory}", "--port", "threads:1", "--inputs", "x=2x16"])
    add("model/syntax error", ["model", "broken:f", "--inputs", "x=2x16"], _module("broken", "def f(:\n"))
    add(
        "model/module exits at import",
        ["model", "gone:f", "--inputs", "x=2x16"],
        _module("gone", "raise SystemExit(0)\n"),
    )
    add("model/module parses argv", ["model", "cli:f", "--inputs", "x=2x16"],
        _module("cli", "import argparse\nargparse.ArgumentParser().parse_args()\ndef f():\n    pass\n"))  # fmt: skip
    add("model/inf weights", ["model", "models:inf_weights", "--port", "threads:1", "--inputs", "x=2x16"],
        reject="Warning")  # fmt: skip
    add("model/forward changes its input", ["model", "models:in_place", "--port", "threads:1", "--inputs", "x=2x16"])
    add("model/escape in a module name", ["model", "models:escape_name", "--port", "threads:1", "--inputs", "x=2x16"])
    add("model/shape typo", [*MODEL, "--inputs", "x=2x16y"])
    add("model/zero-size", [*MODEL, "--inputs", "x=0x16"])
    add("model/zero step", [*MODEL, "--inputs", "x=2x0"])
    add("model/huge shape", [*MODEL, "--inputs", "x=100000000x100000"])
    add("model/wrong width", [*MODEL, "--inputs", "x=2x7"])
    add("model/wrong name", [*MODEL, "--inputs", "y=2x16"])
    add("model/inputs NaN", [*MODEL, "--inputs", "n.npz"], _npz("n.npz", x=np.full((2, 16), np.nan, "f4")))
    add("model/inputs inf", [*MODEL, "--inputs", "i.npz"], _npz("i.npz", x=np.full((2, 16), np.inf, "f4")))
    add("model/inputs int64", [*MODEL, "--inputs", "d.npz"], _npz("d.npz", x=np.ones((2, 16), "i8")))
    add("model/inputs float16", [*MODEL, "--inputs", "h.npz"], _npz("h.npz", x=np.ones((2, 16), "f2")))
    add("model/inputs complex", [*MODEL, "--inputs", "c.npz"], _npz("c.npz", x=np.ones((2, 16), "c8")))
    add("model/inputs truncated .npz", [*MODEL, "--inputs", "t.npz"], _truncated("x.npz", "t.npz"))
    add("model/inputs truncated .safetensors", [*MODEL, "--inputs", "t.safetensors"],
        _steps(_good_safetensors, _truncated("x.safetensors", "t.safetensors", 0.7)))  # fmt: skip
    add("model/inputs corrupt .safetensors", [*MODEL, "--inputs", "c.safetensors"],
        _steps(_good_safetensors, _flipped("x.safetensors", "c.safetensors")))  # fmt: skip
    add("model/inputs good .pt", [*MODEL, "--inputs", "x.pt"], _torch_pt)
    add("model/inputs pickled .pt", [*MODEL, "--inputs", "evil.pt"], _pickled_pt)
    add("model/inputs a FIFO", [*MODEL, "--inputs", "f.npz"], _fifo("f.npz"), timeout=30)
    add("model/inputs a directory", [*MODEL, "--inputs", "dir"], _directory("dir"))
    add("model/port unknown", ["model", "models:tiny", "--port", "nosuch", "--inputs", "x=2x16"])
    add("model/threads 0", ["model", "models:tiny", "--port", "threads:0", "--inputs", "x=2x16"])
    add("model/activations truncated", [*MODEL, "--inputs", "x=2x16", "--activations", "p=t.safetensors"],
        _steps(_good_safetensors, _truncated("x.safetensors", "t.safetensors", 0.7)))  # fmt: skip
    add("model/activations empty .npz", [*MODEL, "--inputs", "x=2x16", "--activations", "p=e.npz"], _npz("e.npz"))
    add("model/activations wrong shapes", [*MODEL, "--inputs", "x=2x16", "--activations", "p=w.npz"],
        _npz("w.npz", up=np.zeros((3, 3), "f4"), output=np.zeros((1,), "f4")))  # fmt: skip
    add("model/onnx truncated", [*MODEL, "--inputs", "x=2x16", "--onnx", "o=t.onnx"],
        _steps(_onnx, _truncated("tiny.onnx", "t.onnx")), timeout=120)  # fmt: skip
    add("model/onnx random bytes", [*MODEL, "--inputs", "x=2x16", "--onnx", "o=r.onnx"],
        _write("r.onnx", bytes(range(256)) * 8))  # fmt: skip
    add("model/onnx a directory", [*MODEL, "--inputs", "x=2x16", "--onnx", "o=dir"], _directory("dir"))
    add("model/html existing file", [*MODEL, "--inputs", "x=2x16", "--html", "keep.txt"])
    add("model/html under a file", [*MODEL, "--inputs", "x=2x16", "--html", "keep.txt/p.html"])
    add("model/html into /proc", [*MODEL, "--inputs", "x=2x16", "--html", "/proc/opbench-probe.html"],
        expect="every compared layer within rounding")  # fmt: skip  # the text report, printed before the page
    add("model/html a symlink", [*MODEL, "--inputs", "x=2x16", "--html", "l.html"], _symlink("l.html", "keep.txt"))
    add("model/save-activations existing", [*MODEL, "--inputs", "x=2x16", "--save-activations", "x.npz"])
    add("model/save-activations missing dir", [*MODEL, "--inputs", "x=2x16", "--save-activations", "no/a.npz"])
    add("model/save-activations .txt", [*MODEL, "--inputs", "x=2x16", "--save-activations", "a.txt"])
    add("model/interrupted", ["model", "models:sleeps", "--inputs", "x=2x16"], signal_after=8.0, timeout=60)
    add("model/interrupted while running", [*MODEL, "--inputs", "x=64x16"], signal_after=5.0, timeout=60)
    add("model/terminated", ["model", "models:sleeps", "--inputs", "x=2x16"], signal_after=8.0, timeout=60,
        signal=signal.SIGTERM)  # fmt: skip
    add("model/hung up", ["model", "models:sleeps", "--inputs", "x=2x16"], signal_after=8.0, timeout=60,
        signal=signal.SIGHUP)  # fmt: skip
    add("explain/interrupted", ["explain", "matmul", "--size", "512"], signal_after=4.0, timeout=60)
    add("check/interrupted", [*CHECK, "--output", "a=out.npy"], signal_after=2.0, timeout=60)
    add("model/deleted working directory", [*MODEL, "--inputs", "x=2x16"],
        lambda d: (d / "gone").mkdir(), env={"PROBE_CWD": "gone"})  # fmt: skip
    # issue 57's own cases
    add("model/a page appears during the run", ["model", "models:page_appears", "--port", "threads:1", "--inputs",
        "x=2x16", "--html", "page.html"], kept=("page.html",))  # fmt: skip
    add("model/module named output, a#b and c/d", ["model", "models:named_output", "--port", "threads:1",
        "--inputs", "x=2x16"], expect="%output")  # fmt: skip
    add("model/forward changes its input, two ports, cold cache", ["model", "models:in_place", "--port", "threads:1",
        "--port", "onnxruntime", "--inputs", "x=2x16"], timeout=180, env={"OPBENCH_CACHE": "{dir}/cold-cache"},
        reject=r"beyond rounding|NOT within|PyTorch's own: 0\.")  # fmt: skip
    add("model/activations mixing float16 and float32", [*MODEL, "--inputs", "x=2x16", "--activations", "p=m.npz"],
        _npz("m.npz", up=np.zeros((2, 8), "f2"), act=np.zeros((2, 8), "f4"), head=np.zeros((2, 4), "f4"),
             output=np.zeros((2, 4), "f4")))  # fmt: skip
    add("model/activations mixing float32 and float16, float16 last", [*MODEL, "--inputs", "x=2x16", "--activations",
        "p=m.npz"], _npz("m.npz", output=np.zeros((2, 4), "f4"), head=np.zeros((2, 4), "f4"),
                         act=np.zeros((2, 8), "f4"), up=np.zeros((2, 8), "f2")))  # fmt: skip
    add("model/activations with a NaN output", [*MODEL, "--inputs", "x.npz", "--activations", "nan=nan.safetensors"],
        _made_by(NAN_OUTPUT), expect="not finite", reject=r"by 0\b|0 from float64")  # fmt: skip
    add("model/factory naps 12 s", ["model", "models:naps", "--port", "threads:1", "--inputs", "x=2x16"],
        expect="opbench: building the model: models:naps has run for 10 s")  # fmt: skip
    add("model/escape in a module name, --html", ["model", "models:escape_name", "--port", "threads:1", "--inputs",
        "x=2x16", "--html", "page.html"])  # fmt: skip
    add("model/hand-written BatchNorm, pool and resize", ["model", "models:hand_cnn", "--port", "threads:1",
        "--inputs", "x=2x3x8x8"], expect="every compared layer within rounding")  # fmt: skip
    add("model/hand-written BatchNorm's eps wrong in a port", ["model", "models:hand_cnn", "--inputs", "hx.npz",
        "--activations", "p=hport.safetensors"], _made_by(HAND_PORT), expect="eps = 0.001", timeout=120)  # fmt: skip
    add("model/large inputs under ulimit -v", [*MODEL, "--inputs", "x=40000000x16"], address_space=6 << 30)
    add("check/large output under ulimit -v", [*CHECK, "--output", "a=big.npy"],
        _npy("big.npy", np.zeros((4, 3), "f4")), address_space=6 << 30)  # fmt: skip
    add("model/dask service closes at once", [*MODEL, "--inputs", "x=2x16", "--dask", "tcp://127.0.0.1:{closer}"])
    add("model/dask nobody listening", [*MODEL, "--inputs", "x=2x16", "--dask", "tcp://127.0.0.1:9"])
    add("model/dask tls", [*MODEL, "--inputs", "x=2x16", "--dask", "tls://127.0.0.1:9"])
    add("model/dask local:0", [*MODEL, "--inputs", "x=2x16", "--dask", "local:0"])
    # generate (owned by the generation helper: listed, not fixed here)
    add("generate/missing module", ["generate", "nosuch:f", "--inputs", "1,2,3", "--steps", "2"])
    add("generate/steps 0", ["generate", "models:tiny", "--inputs", "1,2,3", "--steps", "0"])
    add("generate/steps negative", ["generate", "models:tiny", "--inputs", "1,2,3", "--steps", "-1"])
    add("generate/ids not numbers", ["generate", "models:tiny", "--inputs", "a,b", "--steps", "2"])
    add("generate/factory returns a list", ["generate", "models:returns_list", "--inputs", "1,2", "--steps", "2"])
    add("generate/not a language model", ["generate", "models:tiny", "--inputs", "1,2,3", "--steps", "2"])
    return found


# --- running and judging --------------------------------------------------------------------------


def _snapshot(d: Path) -> dict[str, str]:
    """Every regular file under `d` (links not followed) by its digest."""
    found = {}
    for root, _, files in os.walk(d):
        for name in files:
            path = Path(root, name)
            if path.is_symlink() or not path.is_file():
                found[str(path.relative_to(d))] = "link" if path.is_symlink() else "special"
                continue
            found[str(path.relative_to(d))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def classify(rc: int | None, out: bytes, err: bytes, before: dict, after: dict, marker: bool) -> tuple[str, str]:
    """(outcome, detail) of one run."""
    text = (out + err).decode("utf-8", "replace")
    lost = [name for name, digest in before.items() if after.get(name) != digest]
    if marker:
        return "SECURITY", "a data file ran code"
    if CONTROL.search(out + err):
        return "SECURITY", f"a raw control byte on the terminal: {CONTROL.search(out + err).group()!r}"
    if lost:
        return "LOSS", f"changed or removed: {', '.join(lost)}"
    if rc is None:
        return "HANG", "no exit in time"
    if "Traceback (most recent call last)" in text:
        line = next((row for row in reversed(text.splitlines()) if row.strip()), "")
        return "TRACEBACK", line[:200]
    rows = err.decode("utf-8", "replace").splitlines()
    lines = [row for row in rows if row.strip() and not row.startswith("opbench: warning")]
    last = lines[-1][:200] if lines else ""
    if rc == 2 and len(lines) == 1 and lines[0].startswith("opbench: error: "):
        return "RIGHT", last
    if rc == 2 and lines and lines[0].startswith("usage: ") and re.match(r"opbench \w+: error: ", last):
        return "RIGHT", last  # argparse's own refusal: its usage, then one line
    if rc in (0, 1) and out.strip():
        return "CLEAN", (out.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:200]
    return "WRONG", f"exit {rc}; {len(lines)} lines on stderr; last: {last}"


def expected(case: Case, text: str, outcome: str, detail: str) -> tuple[str, str]:
    """WRONG where an answer lacks what the case expects of it, or holds what it must not."""
    if case.expect and not re.search(case.expect, text):
        return "WRONG", f"no {case.expect!r} in the answer; {detail}"
    found = re.search(case.reject, text) if case.reject else None
    if found:
        return "WRONG", f"{found.group()!r} in the answer; {detail}"
    return outcome, detail


_closer: list[int] = []


def closing_server() -> int:
    """The port of a TCP service here that closes every connection at once (started once)."""
    import socket
    import threading

    if not _closer:
        server = socket.create_server(("127.0.0.1", 0))
        _closer.append(server.getsockname()[1])

        def serve() -> None:
            while True:
                connection, _ = server.accept()
                connection.close()

        threading.Thread(target=serve, daemon=True).start()
    return _closer[0]


def _as_in_a_terminal(address_space: int | None) -> None:
    """SIGINT handled as in a terminal: a probe started in the background (`cmd &`) has it ignored,
    which its children inherit, and Python then never sees Ctrl-C. `address_space`: ulimit -v."""
    import resource

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


def run_case(case: Case, base: Path) -> Result:
    d = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    good_files(d)
    if case.setup:
        case.setup(d)
    before = _snapshot(d)
    own = {k: v.replace("{dir}", str(d)) for k, v in case.env.items()}  # {dir}: the case's directory
    env = {**os.environ, "PYTHONPATH": str(d), "COLUMNS": "120", **own}
    cwd = d / env.pop("PROBE_CWD") if "PROBE_CWD" in env else d
    argv = [part.replace("{closer}", str(closing_server())) if "{closer}" in part else part for part in case.argv]
    command = [sys.executable, "-m", "accuracy", *argv]
    if "PROBE_CWD" in case.env:  # the working directory removed before the command starts
        command = ["sh", "-c", f'rmdir "{cwd}" && exec "$0" "$@"', *command]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, start_new_session=True,
                               preexec_fn=lambda: _as_in_a_terminal(case.address_space))  # fmt: skip
    rc: int | None
    try:
        if case.signal_after:
            try:
                out, err = process.communicate(timeout=case.signal_after)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, case.signal)  # as Ctrl-C or a job scheduler: the whole group
        out, err = process.communicate(timeout=case.timeout)
        rc = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        rc = None
    seconds = time.perf_counter() - started
    marker = (d / MARKER).exists() or (cwd / MARKER).exists()
    after = _snapshot(d) if d.exists() else {}
    outcome, detail = classify(rc, out, err, before, after, marker)
    if outcome in ("CLEAN", "RIGHT"):
        outcome, detail = expected(case, (out + err).decode("utf-8", "replace"), outcome, detail)
    overwritten = [name for name in case.kept if (d / name).read_text(errors="replace") != "a user file\n"]
    if overwritten and outcome not in ("SECURITY", "LOSS"):
        outcome, detail = "LOSS", f"a file made during the run was overwritten: {', '.join(overwritten)}"
    tail = (out[-3000:] + b"\n--- stderr ---\n" + err[-2000:]).decode("utf-8", "backslashreplace")
    return Result(case.name, outcome, rc, seconds, detail, tail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="only the cases whose name this regex finds")
    parser.add_argument("--json", help="write every case's result here")
    parser.add_argument("--jobs", type=int, default=1, help="cases at once (default 1)")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    args = parser.parse_args()
    selected = [c for c in cases() if not args.only or re.search(args.only, c.name)]
    if args.list:
        print("\n".join(c.name for c in selected), f"\n{len(selected)} cases", sep="")
        return 0
    results: list[Result] = []
    with (
        tempfile.TemporaryDirectory(prefix="opbench-probe-") as base,
        concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool,
    ):
        for result in pool.map(lambda c: run_case(c, Path(base)), selected):
            results.append(result)
            print(f"{result.outcome:<9} {result.seconds:6.1f}s  {result.name}: {result.detail}", flush=True)
    tally = Counter(r.outcome for r in results)
    print("\n" + ", ".join(f"{k} {tally.get(k, 0)}" for k in OUTCOMES) + f" ({len(results)} cases)")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return int(any(r.outcome not in ("CLEAN", "RIGHT") for r in results))


if __name__ == "__main__":
    sys.exit(main())
