"""Every path ends in an answer, round 4 (issue 57): the paths that still ended in a traceback, a
lost file, a wrong answer or an unclear line, each run as a user meets it."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from cli_runner import run_main
from user_modules import user_module

from accuracy.workflows.array_files import write_arrays

SMALL_CNN = "accuracy.workflows.model.zoo:small_cnn"


def test_a_page_that_appears_during_the_run_is_kept_and_the_report_still_printed(tmp_path, capsys, monkeypatch):
    """--html FILE was checked absent before the run, then replaced at the end whatever was there:
    a file the user made meanwhile was lost (exit 0). And a page that could not be written cost
    the whole text report."""
    from accuracy.report import model_page

    page = tmp_path / "page.html"
    drawn = model_page.model_page

    def user_writes_first(*drawn_from):
        page.write_text("the user's own file")
        return drawn(*drawn_from)

    monkeypatch.setattr(model_page, "model_page", user_writes_first)
    status, out, err = run_main(
        capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "threads:1", "--html", page
    )
    assert status == 2 and page.read_text() == "the user's own file"
    assert err.strip().splitlines()[-1] == (
        f"opbench: error: {page}: a file appeared there during the run; it is kept, not overwritten"
    )
    assert "threads:1 [float32]: every compared layer within rounding" in out  # the report, printed first


def test_an_empty_input_is_one_line_not_a_traceback(capsys):
    """`--inputs input=0x8` ended in `range() arg 3 must not be zero` from the exact GEMM."""
    status, out, err = run_main(capsys, "model", SMALL_CNN, "--inputs", "x=0x3x8x8", "--port", "threads:1")
    assert status == 2 and out == ""
    assert err.strip() == "opbench: error: x=0x3x8x8: x has shape (0, 3, 8, 8), no elements: nothing to compare"


@pytest.mark.slow  # a child process under its own RLIMIT_AS
def test_the_memory_check_honours_the_address_space_limit():
    """Under `ulimit -v` the budget was half of MemAvailable, whatever the limit: large inputs
    passed the check and ended in numpy's _ArrayMemoryError."""
    import re
    import resource

    from cli_runner import start_opbench

    limit = 8 * 1024**3

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = start_opbench("model", SMALL_CNN, "--inputs", "x=50000000x8", "--port", "threads:1", preexec_fn=limited)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    budget = float(re.search(r"more than the budget of ([0-9.]+) GB", err).group(1))
    assert budget <= limit / 2 / 1e9  # half of what the limit leaves, never half the machine's free memory


def test_the_memory_check_honours_the_cgroup_limit(tmp_path, monkeypatch, capsys):
    """A container's or job's memory cgroup (v2 here): its limit less its use, page cache that the
    kernel reclaims first counted free."""
    from accuracy.core import limits

    job = tmp_path / "sys" / "job"
    job.mkdir(parents=True)
    (job / "memory.max").write_text(f"{1024**3}\n")
    (job / "memory.current").write_text(f"{300 * 1024**2}\n")
    (job / "memory.stat").write_text(f"anon 1\ninactive_file {100 * 1024**2}\nactive_file 5\n")
    (tmp_path / "sys" / "memory.max").write_text("max\n")  # the root: no limit
    (tmp_path / "cgroup").write_text("0::/job\n")
    monkeypatch.setattr(limits, "CGROUP_ROOT", str(tmp_path / "sys"))
    monkeypatch.setattr(limits, "PROC_CGROUP", str(tmp_path / "cgroup"))
    assert limits.available_memory() == 824 * 1024**2
    status, _, err = run_main(capsys, "model", SMALL_CNN, "--inputs", "x=4000000x8", "--port", "threads:1")
    assert status == 2 and "more than the budget of 0.4 GB" in err


USER_MODELS = """
import sys

import torch
from torch import nn


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Hardswish(), nn.Linear(32, 8)).eval()


def inf_weight():
    model = mlp()
    with torch.no_grad():
        model[0].weight[0, 0] = float("inf")
    return model
"""


@pytest.fixture
def user(tmp_path, monkeypatch):
    """The user's module `round4` importable from the current directory, as `opbench model` finds it."""
    with user_module(tmp_path, monkeypatch, "round4", USER_MODELS) as directory:
        yield directory


def test_inf_weights_or_inputs_give_no_numpy_warning(user, capsys):
    """numpy's RuntimeWarning ('invalid value encountered in subtract') with a line of opbench's
    source reached stderr; the report already counts the non-finite values."""
    import warnings

    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    x[1, 3] = np.inf
    inputs = str(write_arrays(user / "input.npz", {"input": x}))
    for factory, given in (("round4:mlp", inputs), ("round4:inf_weight", "input=4x16")):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            status, _, err = run_main(
                capsys, "model", factory, "--inputs", given, "--port", "threads:1", "--port", "onnxruntime"
            )
        assert status in (0, 1) and "Warning" not in err
        assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == [], factory


DOUBLING = '''
import torch
from torch import nn


class Doubling(nn.Module):
    """A forward that writes to its input before its layers run."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.act = nn.Tanh()

    def forward(self, x):
        x.mul_(2)
        return self.act(self.fc(x))


def doubling():
    torch.manual_seed(0)
    return Doubling().eval()
'''


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_a_forward_that_changes_its_input_changes_no_other_ports_inputs(tmp_path, monkeypatch, cache):
    """`x.mul_` with threads:1 and onnxruntime on a cold export cache: the export traced the forward
    on the shared input, doubling it, and PyTorch's own port read 'beyond rounding: output error
    0.495' (exit 1), its layer 0 'inherited 2.41'; on a warm cache exit 0."""
    from accuracy.workflows.model.sweep import ModelRun, run_model

    monkeypatch.setenv("OPBENCH_CACHE", str(tmp_path / "cache"))
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    inputs = str(write_arrays(tmp_path / "x.npz", {"x": x}))
    with user_module(tmp_path, monkeypatch, "doubles", DOUBLING):
        if cache == "warm":
            run_model(ModelRun("doubles:doubling", inputs, ["onnxruntime"]))
        report = run_model(ModelRun("doubles:doubling", inputs, ["threads:1", "onnxruntime"]))
    for port in report.ports:
        assert port.end_to_end.verdict == "within rounding", (port.port, port.end_to_end)
        assert port.output["relative_error"] < 1e-6, port.port
        first = port.layers[0]
        assert (first.inherited or 0) == 0, (port.port, first)
    assert report.within_rounding


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import sys\nsys.exit(0)\n", "importing exits_at_import called sys.exit(0)"),
        (
            "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--lr', type=float, "
            "default=0.1)\nARGS = parser.parse_args()\n\n\ndef f():\n    return 1\n",
            "the factory returned a int, not a torch.nn.Module",
        ),
    ],
    ids=["sys-exit", "argparse"],
)
def test_a_module_that_exits_or_parses_the_command_line_at_import_is_one_line(
    tmp_path, monkeypatch, capsys, source, message
):
    """`sys.exit(0)` at import exited 0 with no output; a module's own argparse read opbench's
    arguments and printed 'usage: opbench [-h] [--lr LR]'."""
    name = "exits_at_import" if "exit(0)" in source else "parses_argv"
    monkeypatch.setattr(sys, "argv", ["opbench", "model", f"{name}:f", "--inputs", "x=2x8"])
    with user_module(tmp_path, monkeypatch, name, source):
        status, out, err = run_main(capsys, "model", f"{name}:f", "--inputs", "x=2x8", "--port", "threads:1")
    assert status == 2 and out == "" and "usage" not in err
    assert err.strip().startswith("opbench: error: ") and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("first", ["float16", "float32"])
def test_an_activations_file_mixing_float16_and_float32_is_one_line_whatever_its_key_order(tmp_path, capsys, first):
    """It was judged in the dtype of its first key: float16 first exited 0, float16 last was judged
    float32 and flagged."""
    from accuracy.workflows.model.activations_file import activations
    from accuracy.workflows.model.trace import record
    from accuracy.workflows.model.zoo import example_inputs, small_cnn

    inputs = example_inputs("small_cnn")
    calls, out = record(small_cnn().eval(), inputs)
    arrays = activations(calls, out)
    half = {k: v.astype(np.float16) for k, v in arrays.items() if k in ("conv1", "bn1")}
    rest = {k: v for k, v in arrays.items() if k not in half}
    np.savez(tmp_path / "mixed.npz", **(half | rest if first == "float16" else rest | half))
    x = write_arrays(tmp_path / "x.npz", inputs)
    status, out_text, err = run_main(
        capsys, "model", SMALL_CNN, "--inputs", x, "--activations", f"p={tmp_path / 'mixed.npz'}"
    )
    assert status == 2 and out_text == ""
    assert err.strip() == (
        "opbench: error: --activations p: its layer outputs mix float16 ('bn1', ...), float32 ('conv2', ...); "
        "a port is judged in one format: save every output in the format the runtime computes in"
    )


def test_a_non_finite_output_never_differs_by_0(tmp_path, capsys):
    """'10 output value(s) not finite ...' and, in the same line, 'output differs from the float64
    model by 0' (the finite elements' difference)."""
    from accuracy.workflows.model.activations_file import activations
    from accuracy.workflows.model.trace import record
    from accuracy.workflows.model.zoo import example_inputs, small_cnn

    inputs = example_inputs("small_cnn")
    calls, out = record(small_cnn().eval(), inputs)
    arrays = activations(calls, out)
    arrays["output"] = arrays["output"].copy()
    arrays["output"][0, 0] = np.nan
    port = write_arrays(tmp_path / "port.safetensors", arrays)
    x = write_arrays(tmp_path / "x.npz", inputs)
    status, text, _ = run_main(capsys, "model", SMALL_CNN, "--inputs", x, "--activations", f"nan={port}")
    (line,) = [line for line in text.splitlines() if "not finite" in line]
    assert status == 1 and " by 0 " not in line and " 0 from float64" not in line
    status, out, _ = run_main(capsys, "model", SMALL_CNN, "--inputs", x, "--activations", f"nan={port}", "--json")
    (given,) = json.loads(out)["ports"]
    assert given["output"]["relative_error"] is None and given["output"]["relative_error_reason"] == "inf"


def test_a_service_that_closes_the_connection_at_once_is_said_so(capsys, monkeypatch):
    """It was reported as 'answered nothing in 20 s' after 3.4 s."""
    import socket
    import threading

    from accuracy.workflows import cluster

    server = socket.create_server(("127.0.0.1", 0))

    def accept_and_close() -> None:
        while True:
            conn, _ = server.accept()
            conn.shutdown(socket.SHUT_RDWR)  # the end of the stream now, whatever else holds the socket
            conn.close()

    threading.Thread(target=accept_and_close, daemon=True).start()
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 60)  # never reached: the close comes at once
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    status, _, err = run_main(capsys, "scan", "exp", "--dtype", "float16", "--dask", address)
    assert status == 2 and err.strip() == (
        f"opbench: error: cannot reach a Dask scheduler at {address}: the service there closed the connection "
        "without a word (a scheduler greets at once); is it a Dask scheduler?"
    )


@pytest.mark.parametrize("kind", ["directory", "fifo"])
@pytest.mark.parametrize("flag", ["--inputs", "--activations", "--onnx"])
def test_a_directory_or_a_fifo_given_as_a_file_is_called_what_it_is(tmp_path, capsys, kind, flag):
    """Both were reported as 'no such file'."""
    import os

    path = tmp_path / ("given.onnx" if flag == "--onnx" else "given.npz")
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    words = {"directory": "a directory, not a file", "fifo": "a FIFO, not a regular file"}[kind]
    given = ["--inputs", path] if flag == "--inputs" else ["--inputs", "x=2x3x8x8", flag, f"p={path}"]
    status, _, err = run_main(capsys, "model", SMALL_CNN, *given, "--port", "threads:1")
    assert status == 2 and err.strip().endswith(f"{path}: {words}") and "no such file" not in err


def test_a_deleted_working_directory_is_said_so(tmp_path, monkeypatch, capsys):
    """It gave 'Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so', which names nothing the user did."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    status, out, err = run_main(capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "threads:1")
    assert status == 2 and out == ""
    assert err == "opbench: error: the current directory no longer exists (deleted); cd to one that does\n"


def test_a_negative_max_plots_is_refused(tmp_path, capsys):
    """`--max-plots -5` was taken as 'all but the last 5' (a slice's end)."""
    out = tmp_path / "reports"
    status, _, err = run_main(capsys, "report", "--results", tmp_path / "results", "--out", out, "--max-plots", "-5")
    assert status == 2 and err == "opbench: error: --max-plots -5 must be 0 or more (0: no history figures)\n"
    assert not out.exists()


@pytest.mark.slow  # a fresh process: what the terminal shows, ONNX Runtime's import included
def test_a_cache_home_that_is_a_file_runs_without_the_cache_and_says_so_once(tmp_path):
    """`explain` refused (exit 2: 'cannot use .../opbench/refs: Not a directory') where the cache is
    optional; ONNX Runtime's import then wrote its own coloured warning about the same directory.
    (Attention runs ONNX Runtime without TensorFlow, whose seconds of import this claim does not need.)"""
    from cli_runner import run_opbench

    afile = tmp_path / "afile"
    afile.write_text("")
    refs = afile / "opbench" / "refs"
    done = run_opbench(
        "explain",
        "scaled_dot_product_attention",
        "--dtype",
        "float32",
        "--size",
        "16",
        env={"XDG_CACHE_HOME": str(afile), "OPBENCH_CACHE": ""},  # the cache's place from XDG_CACHE_HOME alone
    )
    assert done.returncode == 0 and "scaled_dot_product_attention [float32" in done.stdout
    assert "onnxruntime:" in done.stdout
    assert done.stderr == (
        f"opbench: warning: the reference cache {refs} cannot be used (Not a directory); running without it (slower)\n"
    )


NAMED = """
import torch
from torch import nn


def named():
    torch.manual_seed(0)
    model = nn.Sequential()
    for name, layer in (("a/b", nn.Linear(16, 16)), ("c#d", nn.Tanh()), ("e2e", nn.Linear(16, 16)),
                        ("in0", nn.Tanh()), ("50%", nn.ReLU()), ("output", nn.Linear(16, 8))):
        model.add_module(name, layer)
    return model.eval()
"""


def test_module_names_holding_the_formats_own_characters_are_carried_escaped(tmp_path, monkeypatch, capsys):
    """A top-level `output`, or a name holding `#` or `/`, was refused; each is keyed by its escape
    (`%output`, `a%2Fb`, `c%23d`; `%` itself `%25`, a top-level `e2e` `%e2e`), in the activations
    file as in the report, and a file saved by one run is read back by the next."""
    saved = tmp_path / "saved.safetensors"
    with user_module(tmp_path, monkeypatch, "named_layers", NAMED):
        status, _, err = run_main(
            capsys, "model", "named_layers:named", "--inputs", "input=4x16", "--port", "threads:1",
            "--save-activations", saved,
        )  # fmt: skip
        assert status == 0 and err == ""
        from safetensors.numpy import load_file

        keys = sorted(k for k in load_file(saved) if "/" not in k)
        assert keys == ["%e2e", "%output", "50%25", "a%2Fb", "c%23d", "in0", "output"]
        status, out, _ = run_main(
            capsys, "model", "named_layers:named", "--inputs", "input=4x16", "--activations", f"same={saved}", "--json"
        )
    import json

    (port,) = json.loads(out)["ports"]
    assert status == 0 and port["compared"] == 6 and port["flagged"] == 0
    assert [r["path"] for r in port["layers"]] == ["a%2Fb", "c%23d", "%e2e", "in0", "50%25", "%output"]


def test_a_module_name_holding_a_slash_is_not_compared_on_onnx_saying_why(tmp_path, monkeypatch):
    """The exporter's node names join scopes with '/': `a/b`'s nodes read as module `a`, child `b`;
    the unit is not compared, with that reason (not 'folded away or constant at export'), the rest
    judged."""
    from accuracy.workflows.model.sweep import ModelRun, run_model

    with user_module(tmp_path, monkeypatch, "named_onnx", NAMED):
        (port,) = run_model(ModelRun("named_onnx:named", "input=4x16", ["onnxruntime"])).ports
    rows = {r.path: r for r in port.layers}
    assert rows["a%2Fb"].verdict == "not compared" and "its name holds '/'" in rows["a%2Fb"].reason
    assert port.compared == 5 and port.flagged == 0


def test_a_control_character_in_a_module_name_never_reaches_stderr_through_matplotlib(tmp_path, monkeypatch, capsys):
    """matplotlib's 'Glyph 27 (ESC) missing' warning printed the ESC byte of a module's name raw."""
    import warnings

    source = (
        "import torch\nfrom torch import nn\n\n\ndef m():\n    torch.manual_seed(0)\n    model = nn.Sequential()\n"
        "    model.add_module('fc\\x1b[2J', nn.Linear(16, 8))\n    model.add_module('act', nn.Tanh())\n"
        "    return model.eval()\n"
    )
    page = tmp_path / "page.html"
    with user_module(tmp_path, monkeypatch, "escaped_names", source), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        status, out, err = run_main(
            capsys, "model", "escaped_names:m", "--inputs", "input=4x16", "--port", "threads:1", "--html", page
        )
    assert status == 0 and "\x1b" not in out + err and page.exists()
    assert [str(w.message) for w in seen if "\x1b" in str(w.message)] == []


def test_a_factory_that_sleeps_is_waited_on_aloud(tmp_path, monkeypatch, capsys):
    """It was waited on silently until the user stopped it; now stderr says what opbench waits for
    (after 10 s, then every 30 s: here after a tenth of a second, the factory sleeping a second)."""
    import re

    from accuracy.core import waiting

    source = (
        "import time\n\nimport torch\nfrom torch import nn\n\n\ndef slow():\n    time.sleep(1.0)\n"
        "    torch.manual_seed(0)\n    return nn.Sequential(nn.Linear(16, 8), nn.Tanh()).eval()\n"
    )
    monkeypatch.setattr(waiting, "FIRST_NOTE_S", 0.1)
    monkeypatch.setattr(waiting, "EVERY_S", 0.3)
    with user_module(tmp_path, monkeypatch, "sleepy", source):
        status, out, err = run_main(capsys, "model", "sleepy:slow", "--inputs", "input=4x16", "--port", "threads:1")
    notes = err.strip().splitlines()
    assert status == 0 and "every compared layer within rounding" in out
    assert notes and all(re.fullmatch(r"opbench: building the model: sleepy:slow has run for \d+ s", n) for n in notes)


def test_what_a_models_forward_writes_on_file_descriptor_1_leaves_the_json_whole(tmp_path, monkeypatch, capfd):
    """torch's ONNX exporter dumps a graph with std::cout after a failed pass: Python's redirect of
    sys.stdout never saw it, and `opbench model --json` printed it before the JSON (the census's
    vgg11_bn). A forward that writes to descriptor 1 stands in for it."""
    source = (
        "import os\nimport torch\n\n\nclass Loud(torch.nn.Linear):\n"
        "    def forward(self, x):\n        os.write(1, b'Torch IR graph at exception\\n')\n"
        "        return super().forward(x)\n\n\ndef f():\n    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(Loud(8, 4), torch.nn.ReLU())\n"
    )
    with user_module(tmp_path, monkeypatch, "writes_fd1", source):
        status, out, err = run_main(
            capfd, "model", "writes_fd1:f", "--inputs", "input=2x8", "--port", "threads:1", "--json"
        )
    assert status == 0 and json.loads(out)["ports"][0]["port"] == "threads:1"
    assert "Torch IR graph at exception" in err and "Torch IR graph" not in out
