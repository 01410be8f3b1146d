"""What the bad-input probe (scripts/probe_bad_input.py, issue 57) found, each at its cause, and a
few of its cases run as it runs them: subprocesses, each outcome classified (the whole probe,
150 cases, takes minutes: it is a script, not a test)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli_runner import run_main

ROOT = Path(__file__).resolve().parents[2]


def _probe():
    spec = importlib.util.spec_from_file_location("probe_bad_input", ROOT / "scripts" / "probe_bad_input.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["probe_bad_input"] = module
    spec.loader.exec_module(module)
    return module


def _linear_files(tmp_path, output: np.ndarray) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    x, w, b = (rng.normal(size=s).astype("f4") for s in ((4, 8), (3, 8), (3,)))
    np.savez(tmp_path / "lin.npz", x=x, W=w, b=b)
    np.save(tmp_path / "out.npy", output)
    return str(tmp_path / "lin.npz"), str(tmp_path / "out.npy")


def test_a_non_finite_output_is_never_said_to_be_left_at_0x_its_limit(tmp_path, capsys):
    """An all-NaN output: the nearest catalogue entry was said to leave it "at 0x its tier's limit",
    which reads as within rounding, beside the verdict beyond rounding."""
    inputs, output = _linear_files(tmp_path, np.full((4, 3), np.nan, "f4"))
    result = run_main(capsys, "check", "linear", "--inputs", inputs, "--output", f"a={output}")
    assert result.returncode == 1 and "beyond rounding" in result.stdout
    assert "0x its tier's limit" not in result.stdout
    assert "does not bring it within rounding" in result.stdout


def test_a_directory_given_as_a_file_is_called_a_directory_whatever_its_name(tmp_path, capsys):
    """A directory without a suffix was "unknown file type (none)"."""
    inputs, _ = _linear_files(tmp_path, np.zeros((4, 3), "f4"))
    (tmp_path / "dir").mkdir()
    result = run_main(capsys, "check", "linear", "--inputs", inputs, "--output", f"a={tmp_path / 'dir'}")
    assert result.returncode == 2
    assert result.stderr.strip() == f"opbench: error: {tmp_path / 'dir'}: a directory, not a file"


@pytest.mark.slow
def test_the_probe_classifies_a_few_cases_as_a_user_would_meet_them(tmp_path):
    """Five cases of the probe, run as it runs them: a good check, refusals and a pickle that
    would run code; each ends CLEAN or RIGHT, and a file changed under the run would be LOSS."""
    probe = _probe()
    wanted = {
        "check/good": "CLEAN",
        "check/output missing": "RIGHT",
        "check/output pickled object .npy": "RIGHT",
        "inputs/existing file": "RIGHT",
        "explain/size 0": "RIGHT",
    }
    cases = [c for c in probe.cases() if c.name in wanted]
    assert len(cases) == len(wanted)
    outcomes = {c.name: probe.run_case(c, tmp_path).outcome for c in cases}
    assert outcomes == wanted
    assert len(probe.cases()) >= 80
    before = {"keep.txt": "a"}
    assert probe.classify(0, b"ok\n", b"", before, {}, False)[0] == "LOSS"
    assert probe.classify(1, b"x\x1b[31m\n", b"", {}, {}, False)[0] == "SECURITY"
    assert probe.classify(2, b"", b"Traceback (most recent call last):\n  x\nKeyError: 1\n", {}, {}, False)[0] == (
        "TRACEBACK"
    )


def test_an_answer_lacking_what_its_case_expects_is_wrong():
    """A clean exit is not enough where the issue named a line: the waiting note of a factory that
    sleeps, the absence of 'by 0' beside 'not finite', PyTorch's own port within rounding on a cold
    export cache. Each issue 57 case names what its answer must (not) hold."""
    probe = _probe()
    case = probe.Case("model/x", [], expect="has run for 10 s", reject=r"by 0\b")
    assert probe.expected(case, "opbench: building the model: m:f has run for 10 s\nok", "CLEAN", "ok") == (
        "CLEAN", "ok")  # fmt: skip
    assert probe.expected(case, "ok", "CLEAN", "ok")[0] == "WRONG"
    assert probe.expected(case, "has run for 10 s; differs by 0 here", "CLEAN", "ok")[0] == "WRONG"
    named = {c.name: c for c in probe.cases()}
    for name in ("model/factory naps 12 s", "model/activations with a NaN output",
                 "model/forward changes its input, two ports, cold cache", "explain/cache home a file"):  # fmt: skip
        assert named[name].expect or named[name].reject, name


def _two_machines(tmp_path) -> Path:
    import datetime

    from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file

    bench = SyntheticBenchmark("bench_x.Exp.track_max_ulp", "track", "ulp", ("dtype",), (("'float32'",),))
    results = tmp_path / "results"
    write_benchmarks(results, [bench])
    date = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    for machine in ("box", "other"):
        write_machine(results, machine)
        write_result_file(results, machine, "env", "a" * 40, date, [bench], lambda b, p: 0.5)
    return results


def test_compare_csv_keeps_a_file_that_is_not_a_comparison_and_replaces_its_own(tmp_path, capsys):
    """`compare --csv notes.txt` replaced the user's file without a word; a comparison it wrote
    before is still replaced, as a rerun expects."""
    results = _two_machines(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    refused = run_main(capsys, "compare", "--results", results, "box", "other", "--csv", notes)
    assert refused.returncode == 2 and notes.read_text() == "my notes\n"
    assert refused.stderr.strip() == (
        f"opbench: error: --csv {notes} exists and is not a comparison opbench wrote; it is kept: "
        "choose another name or remove it"
    )
    table = tmp_path / "cmp.csv"
    assert run_main(capsys, "compare", "--results", results, "box", "other", "--csv", table).returncode == 0
    first = table.read_text()
    assert first.startswith("op,benchmark_class,")
    table.write_text(first.replace("0.5", "0.25"))
    assert run_main(capsys, "compare", "--results", results, "box", "other", "--csv", table).returncode == 0
    assert table.read_text() == first


def test_compare_csv_under_a_file_says_it_is_no_directory(tmp_path, capsys):
    """`--csv notes.txt/c.csv` said "File exists" (mkdir's words)."""
    results = _two_machines(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes\n")
    target = tmp_path / "notes.txt" / "c.csv"
    done = run_main(capsys, "compare", "--results", results, "box", "other", "--csv", target)
    assert done.returncode == 2
    assert done.stderr.strip() == f"opbench: error: cannot write {target}: {tmp_path / 'notes.txt'} is not a directory"


@pytest.mark.parametrize(
    "command",
    [
        ["inputs", "exp", "--size", "64", "--save", "{notes}/x.npz"],
        ["model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", "x=1x3x8x8", "--html", "{notes}/p.html"],
        [
            "model",
            "accuracy.workflows.model.zoo:small_cnn",
            "--inputs",
            "x=1x3x8x8",
            "--save-activations",
            "{notes}/a.npz",
        ],
    ],
)
def test_a_file_under_a_file_is_said_to_be_under_no_directory(tmp_path, capsys, command):
    """`--save notes.txt/x.npz` said "directory notes.txt does not exist": it does, as a file."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    done = run_main(capsys, *(part.format(notes=notes) for part in command))
    assert done.returncode == 2 and done.stderr.strip().endswith(f": {notes} is not a directory")
    assert len(done.stderr.strip().splitlines()) == 1 and notes.read_text() == "my notes\n"


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_a_model_run_killed_by_sigterm_or_sighup_ends_in_one_line(tmp_path, stop):
    """`kill` (a job scheduler) or a closed terminal while the factory runs: `opbench model` died
    silently with exit status -15 (-1); it ends as Ctrl-C does, one line naming the signal."""
    import signal
    import time

    from tests.cli_runner import start_opbench

    (tmp_path / "slow.py").write_text(
        "import pathlib\nimport time\n\n\ndef model():\n    pathlib.Path('started').touch()\n    time.sleep(600)\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}

    def as_at_a_terminal() -> None:  # a suite run under `nohup` hands its children SIGHUP ignored, which opbench keeps
        signal.signal(getattr(signal, stop), signal.SIG_DFL)

    process = start_opbench(
        "model", "slow:model", "--inputs", "x=2x16", cwd=tmp_path, env=env, preexec_fn=as_at_a_terminal
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "started").exists():
            time.sleep(0.2)
        process.send_signal(getattr(signal, stop))
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2 and err.strip().splitlines()[-1] == f"opbench: error: interrupted by {stop}"
    assert "Traceback" not in err


def test_inf_weights_are_said_as_inf_inputs_are(tmp_path, capsys, monkeypatch):
    """A model holding an inf weight: the answer said every layer within rounding and its output
    "0 from float64", never that the weights (and so the output) hold inf or NaN."""
    (tmp_path / "infmodel.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.up = nn.Linear(16, 8)\n\n    def forward(self, x):\n"
        "        return self.up(x)\n\n\ndef model():\n    torch.manual_seed(0)\n    m = M().eval()\n"
        "    with torch.no_grad():\n        m.up.weight[0, 0] = float('inf')\n    return m\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        done = run_main(capsys, "model", "infmodel:model", "--port", "threads:1", "--inputs", "x=2x16")
    finally:
        sys.modules.pop("infmodel", None)
    assert done.returncode == 0
    assert "inf or NaN in the weights (up.weight: 1), 2 in the reference's output: judged as data" in done.stdout
