"""Scale-out on Dask (#21): the same bits on a real cluster as in-process, a killed worker costs only
its chunks, a lost scheduler ends in one line with the partial table, a mixed fleet is refused."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest
from cli_runner import run_opbench, start_opbench
from docs_pages import DOCS, sh_block_after

from accuracy.backends.libtorch import BUILDING
from accuracy.catalog.registry import get_op
from accuracy.cli.main import main
from accuracy.core.dtypes import get_format
from accuracy.core.errors import OpbenchError
from accuracy.judge.verdicts import NOT_COMPARED
from accuracy.workflows import cluster
from accuracy.workflows.scan import as_rows, scan

pytestmark = pytest.mark.slow
CHUNK = 4096  # 16 chunks of float16: enough for a worker to die between them
SCALE_OUT = DOCS / "scale-out.md"
LOCAL = ["--dask", "local:2"]


def _page_command(subcommand: str) -> list[str]:
    """A line of docs/scale-out.md's Dask block, as `main` takes it: these tests run each line on
    local:2 and in-process, in place of the docs test (the block is marked not run)."""
    block = sh_block_after("scale-out.md", "runs each line, on local:2")
    for line in block.splitlines():
        program, *words = shlex.split(line.split(" > ", 1)[0])
        if program == ".venv/bin/opbench" and words[0] == subcommand:
            assert words[-3:] == [*LOCAL, "--json"], line
            return words
    raise AssertionError(f"no `opbench {subcommand}` line in {SCALE_OUT}")


def test_the_models_pages_dask_line_is_the_one_run_here():
    """docs/models.md shows scale-out.md's model sweep (not run there: the sweep test runs it)."""
    [line] = sh_block_after("models.md", "### Ports on a Dask cluster").splitlines()
    assert shlex.split(line.split(" > ", 1)[0])[1:] == _page_command("model")


def _in_process(words: list[str]) -> list[str]:
    at = words.index("--dask")
    return words[:at] + words[at + 2 :]


def _json_of(capsys, words: list[str]) -> tuple[int, dict]:
    status = main(words)
    return status, json.loads(capsys.readouterr().out)


def _dask(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_" + args[0], *args[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _worker(address: str) -> subprocess.Popen:
    """A one-thread `dask worker` process joining the scheduler at `address`."""
    return _dask("worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1")


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(n, timeout=120)


@pytest.fixture
def dask_cluster(tmp_path):
    """A real `dask scheduler` and two one-thread `dask worker` processes on 127.0.0.1."""
    scheduler_file = tmp_path / "scheduler.json"
    scheduler = _dask(
        "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)
    )
    workers = []
    try:
        deadline, address = time.monotonic() + 60, None
        while address is None and time.monotonic() < deadline:
            try:  # dask writes the file in place: it can exist and still be empty
                address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        assert address, "the Dask scheduler did not start in 60 s"
        workers = [_worker(address) for _ in range(2)]
        _wait_for_workers(address, 2)
        yield address, scheduler, workers
    finally:
        for process in [*workers, scheduler]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _exp_float16(**kwargs):
    op, fmt = get_op("exp"), get_format("float16")
    impls = [op.impl("numpy:np.exp"), op.impl("torch:torch.exp")]
    return scan(op, fmt, impls, chunk=CHUNK, **kwargs)


def test_scan_on_a_cluster_is_bitwise_the_in_process_scan_survives_a_killed_worker_and_not_its_scheduler(
    dask_cluster, monkeypatch, capsys
):
    """One cluster (processes that import the stack: seconds each) for the scan's outcomes: the
    in-process bits; the same bits with a worker killed mid-scan (dask reruns its chunks); with
    the last worker killed mid-scan, one line (issue 40 item 15: the scheduler kept the chunks
    pending and the scan waited silently for ever); and, on a fresh worker, with the scheduler
    killed a sixteenth of the way in, one line and the partial table, and nothing logged of
    distributed (issue 57 item 3: the client's failed reconnection logged two tracebacks)."""
    address, scheduler, workers = dask_cluster
    here = as_rows(_exp_float16())
    assert here[0]["checked"] == 1 << 16 and here[0]["complete"]

    assert as_rows(_exp_float16(dask=address)) == here

    killed = []

    def kill_one_worker(done, total, seconds):
        if not killed and done >= total // 4:
            os.killpg(workers[0].pid, signal.SIGKILL)  # kill -9 mid-scan: dask reruns its chunks
            killed.append(done)

    result = _exp_float16(dask=address, progress=kill_one_worker)
    assert killed and workers[0].wait() == -signal.SIGKILL
    assert not result.interrupted and as_rows(result) == here

    with monkeypatch.context() as short_wait:
        short_wait.setattr(cluster, "NO_WORKERS_WAIT_S", 1)
        _, err = _scan_killing(workers[1], address, monkeypatch, capsys)
    assert err.count("\n") == 1 and f"the Dask cluster at {address} has had no workers for 1 s" in err

    workers.append(_worker(address))  # the fixture ends it
    _wait_for_workers(address, 1)
    logged = _distributed_logged(monkeypatch)
    partial, err = _scan_killing(scheduler, address, monkeypatch, capsys, at=16)
    assert partial["implementations"][0]["checked"] == partial["inputs"]
    assert err.count("\n") == 1 and f"the Dask scheduler at {address} went away" in err
    assert [r.getMessage() for r in logged if r.levelno >= logging.WARNING] == []


def _distributed_logged(monkeypatch) -> list[logging.LogRecord]:
    """Every record distributed's loggers emit from now on (their handlers replaced)."""
    logged: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = logged.append  # type: ignore[method-assign]
    names = ["distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]
    for name in names:
        monkeypatch.setattr(logging.getLogger(name), "handlers", [handler])
    return logged


def test_the_pages_scan_on_a_local_cluster_is_bitwise_the_in_process_one(capsys):
    words = _page_command("scan")
    status, here = _json_of(capsys, _in_process(words))
    assert status == 0 and here["inputs"] == here["total"] == 1 << 16 and len(here["implementations"]) > 2
    status, there = _json_of(capsys, words)
    assert status == 0 and there.pop("seconds") >= 0 and here.pop("seconds") >= 0
    assert there == here


def test_the_pages_selftest_on_a_local_cluster_is_the_in_process_one(capsys):
    """exp: TensorFlow and JAX on the workers too."""
    words = _page_command("selftest")
    status, here = _json_of(capsys, _in_process(words))
    assert status == 0 and here["complete"]
    assert [(r["op"], r["condition"]) for r in here["cases"]] == [
        ("exp", "random"),
        ("sum", "random"),
        ("sum", "cancelling"),
    ]
    assert all(r["mutants"] > 0 and not r["false_alarms"] for r in here["cases"])
    assert _json_of(capsys, words) == (status, here)


class _Fleet:
    """A stand-in for distributed.Client: one worker whose stack differs from this process's."""

    def __init__(self, there: dict):
        self.there = there

    def scheduler_info(self, n_workers=-1):
        return {"workers": {"tcp://10.0.0.2:4000": {}}}

    def run(self, fn):
        return {"tcp://10.0.0.2:4000": self.there}


def test_a_worker_with_another_stack_is_refused_by_name():
    here = cluster.stack_signature()
    assert here["numpy"] and here["torch"] and here["torch CPU capability"]
    assert cluster.check_workers(_Fleet(dict(here)), "tcp://x:1") == 1
    with pytest.raises(
        OpbenchError, match=r"worker tcp://10.0.0.2:4000 has another numerical stack \(numpy 1.26.4 there"
    ):
        cluster.check_workers(_Fleet({**here, "numpy": "1.26.4"}), "tcp://x:1")
    avx = {**here, "numpy SIMD": "SSE,SSE2"}
    assert cluster.stack_mismatch(here, avx).startswith("numpy SIMD SSE,SSE2 there")


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("local:0", "expected local:N with N >= 1"),
        ("local:two", "expected local:N with N >= 1"),
        ("tcp://127.0.0.1:9", "cannot reach a Dask scheduler at tcp://127.0.0.1:9"),
    ],
)
def test_bad_dask_addresses_are_one_line(address, message, capsys, monkeypatch):
    """And nothing started for them: a bad worker count started (and replaced) the fork server of
    the local workers, which loads every framework the scan runs."""
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    servers = _forkservers(psutil.Process())
    assert main(["scan", "exp", "--dtype", "float16", "--dask", address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert _forkservers(psutil.Process()) == servers


def _model(capsys, *args: str) -> tuple[int, dict, str]:
    """`opbench model ARGS --json`: exit status, the report without its timings, and stderr."""
    status = main(["model", *args, "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    for port in report["ports"]:
        assert port.pop("seconds") >= 0
    return status, report, captured.err


def _difference(a, b, where: str = "report") -> str | None:
    """Where two reports differ (the first place), or None: every value the same, a float to 6
    significant digits (a worker's float32 run may place its operands apart from a fresh
    process's): the verdicts, reasons and structure the same, the measured errors to the digits a
    report shows."""
    if isinstance(a, float) and isinstance(b, float):
        return None if a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b)) else f"{where}: {a!r} != {b!r}"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a.keys() ^ b.keys())}"
        return next((d for k in a if (d := _difference(a[k], b[k], f"{where}.{k}")) is not None), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        return next(
            (d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := _difference(x, y, f"{where}[{i}]"))), None
        )
    return None if a == b else f"{where}: {a!r} != {b!r}"


def _model_fresh(*args: str) -> tuple[int, dict, str]:
    """`_model` in a fresh `opbench` process, at this process's torch thread count: PyTorch's own
    float32 run (the report's `reference_relative_error`) is this process's, at its count, and a
    test worker's count is not a fresh process's. The whole report must match, that run included:
    it once moved in a worker that had listed the BLAS providers before loading torch (7.38e-8
    against 6.39e-8; accuracy/backends/blas/providers.py, `_torch_bound_first`)."""
    import torch

    done = run_opbench("model", *args, "--json", env={"OMP_NUM_THREADS": str(torch.get_num_threads())})
    report = json.loads(done.stdout)
    for port in report["ports"]:
        assert port.pop("seconds") >= 0
    return done.returncode, report, done.stderr


def test_a_model_sweep_on_a_local_cluster_is_the_in_process_one(capsys, tmp_path):
    """The page's sweep: each port is one work item; an activations file travels as data, and the
    workers build the model from its factory with this process's weights."""
    saved = tmp_path / "reference.safetensors"
    words = _page_command("model")
    cnn = words[1 : words.index("--port")]
    assert main(["model", *cnn, "--port", "threads:1", "--save-activations", str(saved)]) == 0
    capsys.readouterr()
    args = [*_in_process(words)[1:-1], "--activations", f"torch={saved}"]
    # in a fresh process, as a user runs it: this test process's history (other tests' global
    # state) once gave a report the fresh workers did not
    here = _model_fresh(*args)
    # progress is for the cluster's work items (LibTorch's one-time build may speak, in a fresh clone)
    assert [line for line in here[2].splitlines() if BUILDING not in line] == []
    status, report, err = _model(capsys, *args, *LOCAL)
    assert status == here[0] and _difference(report, here[1]) is None
    names = [p["port"] for p in report["ports"]] + [a["port"] for a in report["absent_ports"]]
    lines = err.splitlines()
    assert len(lines) == len(names) and lines[-1].startswith(f"model: [{len(names)}/{len(names)}] ")
    assert sorted(names) == ["bfloat16", "cuda", "onnxruntime", "torch", "torchscript"]  # cuda absent without a GPU
    assert here[0] == 0 and all(p["compared"] > 0 for p in report["ports"])


def test_a_model_sweep_spreads_its_units_over_the_workers_with_the_in_process_report(capsys, monkeypatch):
    """#41: on a cluster, each unit is one work item, judged once for all the ports fed it the same
    inputs (as in-process), not once per port inside that port's work item; the JSON is the same
    bit for bit, nested units (the decoder's layers, attention, MLP) included."""
    from accuracy.workflows.model import schedulers

    submitted: list[str] = []
    real_pool = schedulers.work_pool

    @contextlib.contextmanager
    def recording(*args, **kwargs):
        with real_pool(*args, **kwargs) as pool:
            submit = pool.submit

            def spy(fn, *items):
                submitted.append(fn.__name__)
                return submit(fn, *items)

            pool.submit = spy  # type: ignore[method-assign]
            yield pool

    monkeypatch.setattr(schedulers, "work_pool", recording)
    args = ["accuracy.workflows.model.zoo:decoder", "--inputs", "x=1x8x32"]
    args += ["--port", "torchscript", "--port", "onnxruntime", "--port", "bfloat16"]
    here = _model_fresh(*args)
    status, report, err = _model(capsys, *args, *LOCAL)
    assert status == here[0] and _difference(report, here[1]) is None
    assert max(row["depth"] for port in report["ports"] for row in port["layers"]) == 2  # nested units
    judged = {
        (tuple(row["covers"]), port["dtype"])
        for port in report["ports"]
        for row in port["layers"]
        if row["verdict"] != NOT_COMPARED
    }
    compared = sum(port["compared"] for port in report["ports"])
    # torchscript's and ONNX Runtime's float32 units on the same layers are judged once for both
    assert 0 < len(judged) < compared
    assert submitted == ["port_task"] * 3 + ["judge_task"] * len(judged)
    assert err.splitlines()[-1].startswith("model: [3/3] ")


def test_a_model_sweep_on_a_scheduler_and_a_factory_its_workers_cannot_import(
    dask_cluster, tmp_path, monkeypatch, capsys
):
    address, scheduler, _ = dask_cluster
    block = ["accuracy.workflows.model.zoo:small_transformer", "--inputs", "x=2x4x16", "--port", "torchscript"]
    assert _model(capsys, *block, "--dask", address)[:2] == _model(capsys, *block)[:2]

    (tmp_path / "only_here.py").write_text("from accuracy.workflows.model.zoo import small_transformer as make\n")
    monkeypatch.chdir(tmp_path)  # importable here (the current directory), not where the workers run
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["model", "only_here:make", "--inputs", "x=2x4x16", "--dask", address]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("opbench: error: on Dask worker tcp://127.0.0.1:")
    assert "cannot import only_here" in captured.err

    # the scheduler goes away after the first port: the ports finished so far, marked partial, then one line
    from accuracy.cli import model_command

    def kill_the_scheduler(done, total, label, seconds):
        if scheduler.poll() is None:
            os.killpg(scheduler.pid, signal.SIGKILL)

    monkeypatch.setattr(model_command, "item_progress", lambda command: kill_the_scheduler)
    ports = ["torchscript", "onnxruntime", "threads:1", "bfloat16"]
    status, report, err = _model(capsys, *block[:-2], *(a for p in ports for a in ("--port", p)), "--dask", address)
    assert status == 2 and err.count("\n") == 1
    assert f"the Dask scheduler at {address} went away" in err and "the ports finished so far" in err
    done = [p["port"] for p in report["ports"]]
    assert done[0] == "torchscript" and report["ports_not_run"] and report["interrupted"] in err
    assert done + report["ports_not_run"] == ports  # ports are collected in order: the rest were not run


def _forkservers(process: psutil.Process) -> list[psutil.Process]:
    """The multiprocessing fork servers `process` started."""
    found = []
    for child in process.children():
        with contextlib.suppress(psutil.Error):
            if "forkserver" in " ".join(child.cmdline()):
                found.append(child)
    return found


def _forkserver(proc: subprocess.Popen) -> psutil.Process | None:
    return next(iter(_forkservers(psutil.Process(proc.pid))), None)


def _reached(moment: str, proc: subprocess.Popen, started: float) -> bool:
    """Whether the command is at `moment`: in opbench's imports (5 s in, past the interpreter's
    start-up, which is Python's own, no cluster yet; or the cluster's start, on a fast machine),
    with the cluster's fork server started but not both workers, or with both workers up."""
    try:
        server = _forkserver(proc)
        if moment == "importing":
            return server is not None or time.monotonic() - started >= 5
        workers = len(server.children()) if server else 0
    except psutil.Error:  # a child that went away as it was looked at
        return False
    return workers >= 2 if moment == "running" else server is not None


# long enough (a minute's work) that every moment comes well before the end on a fast host: a
# float16 scan (4 s) or small_cnn's one port (5 s) could end as the 5 s moment came. The scan's
# time is its float64 references': two implementations take as long as all six, and the fork
# server loads one framework (torch: seconds of imports to interrupt) instead of five (~4 CPU-s more)
SCAN = ["scan", "exp", "--dtype", "float64", "--sample", "4000000", "--impl", "numpy:np.exp"]
SCAN += ["--impl", "torch:torch.exp"]
MODEL = ["model", "accuracy.workflows.model.zoo:resnet18", "--inputs", "x=1x3x64x64"]


@pytest.mark.parametrize(
    "command, moment",
    # each moment once, and the running one for both commands: before the pool exists and while
    # it starts, both commands are in the same code (main's handler, work_pool), so the scan (the
    # lighter: no model built and traced before its pool) takes those; once the workers run, each
    # command gathers what is finished its own way
    [(SCAN, "importing"), (SCAN, "starting"), (SCAN, "running"), (MODEL, "running")],
    ids=["scan-importing", "scan-starting", "scan-running", "model-running"],
)
def test_ctrl_c_on_a_local_cluster_ends_in_one_line_at_any_moment(command, moment):
    """#40: Ctrl-C as a terminal sends it (SIGINT to the whole process group, the local workers
    included) printed ~60 lines of worker tracebacks, or was swallowed by Dask (the command then
    waited a minute for workers) or left half a cluster whose closing at exit failed. Now: one
    line, exit status 2, what was finished printed, and no process of the command left."""
    proc = start_opbench(
        *command,
        *LOCAL,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even when this suite runs in the background
    )
    started = time.monotonic()
    while proc.poll() is None and not _reached(moment, proc, started):
        time.sleep(0.02)
    finished_first = proc.poll() is not None  # a loaded machine: the moment passed unseen
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    if proc.returncode == 0:  # it finished before the signal landed: then it said nothing more
        assert (moment == "running" or finished_first) and err.count("opbench:") == 0, (moment, out, err)
    else:
        assert proc.returncode == 2, out + err
        [line] = [line for line in err.splitlines() if not line.startswith("model: [")]
        assert line.startswith("opbench: error: interrupted"), err
        assert out == "" or "interrupted" in out or "partial" in out
    deadline = time.monotonic() + 30  # the workers, closed by the command, are gone soon after
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("processes of the command were left running")


def test_ctrl_c_while_the_fork_server_starts_is_remembered_not_lost(monkeypatch):
    """This process ignored Ctrl-C while it forked the server (so that the server inherited the
    ignoring), and a Ctrl-C in that window was dropped: the command ran to its end. Now the
    server is forked with Ctrl-C blocked in this thread, the handler that remembers it in place."""
    from multiprocessing import forkserver

    remembering = []

    def started_while_ctrl_c_arrives():
        remembering.append(signal.getsignal(signal.SIGINT))
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # what the server inherits
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(forkserver, "ensure_running", started_while_ctrl_c_arrives)
    # as in a terminal: Ctrl-C raises (a test worker of xdist's may start with it ignored)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    with contextlib.ExitStack() as restore:
        restore.callback(signal.signal, signal.SIGINT, before)
        with cluster._ctrl_c_remembered():
            cluster._start_server_deaf_to_ctrl_c()
            time.sleep(0.05)  # Python runs a signal's handler between bytecodes of the main thread
            assert cluster._interrupted.is_set()
            assert remembering[0] not in (signal.SIG_IGN, signal.SIG_DFL)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_later_local_cluster_has_this_process_environment_and_directory(tmp_path, monkeypatch, recwarn):
    """The fork server a local cluster's workers come from lives as long as this process, and they
    have the environment, directory and import path it was started with: a second `local:N` after
    this process changed them (another OPBENCH_CACHE, a variable a test set, a notebook's chdir)
    ran on the first's, and its report was not the in-process one. The first server is replaced
    while a process forked from this one (as startup_threads forks its workers) holds its pipe.
    And Dask's default HTTP port may be another cluster's (another user's, here): that is no news."""
    import multiprocessing
    import socket

    seen, forked = [], multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,))
    with socket.socket() as other:
        with contextlib.suppress(OSError):  # already held by someone else: as good
            other.bind(("127.0.0.1", 8787))
            other.listen()
        try:
            for setting in ("first", "second"):
                (tmp_path / setting).mkdir()
                monkeypatch.chdir(tmp_path / setting)
                monkeypatch.setenv("OPBENCH_TEST_SETTING", setting)
                with cluster.work_pool("local:1") as pool:
                    got = pool.submit(os.getenv, "OPBENCH_TEST_SETTING").result(), pool.submit(os.getcwd).result()
                    seen.append((pool.workers, *got))
                if not forked.is_alive():
                    forked.start()
        finally:
            forked.kill()
    assert seen == [(1, setting, str(tmp_path / setting)) for setting in ("first", "second")]
    assert not [w for w in recwarn if "8787" in str(w.message)]


LOADED_ON_WORKERS = """
import json, os, signal, sys
from accuracy.workflows.cluster import work_pool

def worker():
    deaf = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    held = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return os.getppid(), "onnxruntime" in sys.modules, deaf, held

if __name__ == "__main__":
    with work_pool("local:2", preload=["onnxruntime"]) as pool:
        seen = [pool.submit(worker).result() for _ in range(4)]
    held = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    print(json.dumps({"workers": seen, "here": [os.getpid(), "onnxruntime" in sys.modules, held]}))
"""


def test_local_workers_fork_from_one_server_that_loaded_their_backends(tmp_path):
    """`work_pool("local:N", preload=...)`: the workers are forked from one server that loaded the
    named backends' frameworks (not spawned by this process, each importing them for itself), and
    that server says nothing on the terminal. A fresh process: the server serves the process that
    started it for its life."""
    script = tmp_path / "loaded.py"
    script.write_text(LOADED_ON_WORKERS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    seen = json.loads(done.stdout)
    [(server, loaded, deaf, held)] = {tuple(w) for w in seen["workers"]}
    assert loaded and server != seen["here"][0]
    assert seen["here"][1] is False  # this process never imported the framework
    # Ctrl-C: ignored by the workers, not held pending there; this process's own is not blocked
    assert deaf and not held and seen["here"][2] is False


def _scan_killing(process, address, monkeypatch, capsys, at: int = 4) -> tuple[dict, str]:
    """`scan --json --dask address`, killing `process` (its process group) 1/`at` of the way in (16:
    after the first of the 16 chunks): the partial report (checked to be partial) and stderr."""
    from accuracy.cli import scan_command

    class Kill(scan_command._Progress):
        def __call__(self, done, total, seconds):
            if done >= total // at and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)

    monkeypatch.setattr(scan_command, "_Progress", Kill)
    monkeypatch.setattr("accuracy.workflows.scan.CHUNK", CHUNK)
    capsys.readouterr()
    assert main(["scan", "exp", "--dtype", "float16", "--impl", "numpy:np.exp", "--json", "--dask", address]) == 2
    out, err = capsys.readouterr()
    partial = json.loads(out)
    assert partial["interrupted"] and 0 < partial["inputs"] < partial["total"] == 1 << 16
    return partial, err
