"""Bring your own case (#11): `opbench inputs`, `opbench check` (an op or --fn), accuracy.check and
accuracy.testing.assert_within_rounding, on real numbers: numpy's and torch's outputs on the
exported inputs, the same with the bias scaled by 1.01, and every kind of bad input."""

from __future__ import annotations

import json
import re
import textwrap

import numpy as np
import pytest
import torch
from cli_runner import run_main
from hypothesis import given, settings
from hypothesis import strategies as st

import accuracy
from accuracy.catalog.registry import all_ops
from accuracy.judge.verdicts import WITHIN, correctly_rounded
from accuracy.testing import assert_within_rounding
from accuracy.workflows.array_files import read_arrays, write_arrays
from accuracy.workflows.evaluation import make_case

LINEAR_SIZE = 256  # 32 x 256 @ 256 x 64: the same op, a fraction of the default's time


@pytest.fixture
def linear_files(tmp_path, monkeypatch, capsys):
    """`opbench inputs linear` saved, and numpy's x @ W.T + b with and without a 1% bias error."""
    monkeypatch.chdir(tmp_path)
    status, out, _ = run_main(capsys, "inputs", "linear", "--size", LINEAR_SIZE, "--save", "lin.npz")
    assert status == 0
    assert "x: float32 (32, 256)" in out and "W: float32 (64, 256)" in out and "b: float32 (64,)" in out
    assert "torch: F.linear" in out and "numpy: x @ W.T + b" in out
    z = read_arrays("lin.npz")
    x, W, b = z["x"], z["W"], z["b"]
    np.save("numpy.npy", x @ W.T + b)
    np.save("biased.npy", x @ W.T + b * np.float32(1.01))
    torch.save(torch.nn.functional.linear(*map(torch.from_numpy, (x, W, b))), "torch.pt")
    return tmp_path


def test_inputs_are_the_cases_rounded_inputs_by_name(linear_files):
    saved = read_arrays(linear_files / "lin.npz")
    case = make_case("linear", "float32", LINEAR_SIZE)
    assert saved.keys() == case.inputs.keys()
    assert all(saved[k].tobytes() == case.inputs[k].tobytes() for k in saved)


def test_numpy_linear_is_within_rounding_and_a_scaled_bias_is_not(linear_files, capsys):
    status, out, _ = run_main(
        capsys,
        "check",
        "linear",
        "--inputs",
        "lin.npz",
        "--output",
        "numpy=numpy.npy",
        "--output",
        "torch=torch.pt",
        "--json",
    )
    report = json.loads(out)
    assert status == 0
    assert set(report) == {"op", "dtype", "inputs", "outputs", "pairs"}
    assert report["inputs"] == {"x": [32, 256], "W": [64, 256], "b": [64]}
    for row in report["outputs"]:
        assert row["verdict"] == WITHIN and row["typical_ratio"] < 1 and row["bound_ratio"] < 1
    # numpy's and torch's float32 linear: the same bits where both reach the same BLAS kernel
    assert report["pairs"][0]["class"] in (WITHIN, "identical")

    status, out, _ = run_main(
        capsys, "check", "linear", "--inputs", "lin.npz", "--output", "numpy=numpy.npy", "--output", "biased=biased.npy"
    )
    assert status == 1
    assert re.search(r"^biased +(suspicious|beyond rounding) ", out, re.M)
    assert re.search(r"^numpy +within rounding ", out, re.M)


def test_every_file_format_gives_the_same_verdict(linear_files, capsys):
    from safetensors.numpy import save_file

    out = np.load(linear_files / "biased.npy")
    np.savez("biased.npz", y=out)
    save_file({"y": out}, "biased.safetensors")
    torch.save(torch.from_numpy(out), "biased.pt")
    status, text, _ = run_main(
        capsys,
        "check",
        "linear",
        "--inputs",
        "lin.npz",
        "--json",
        *[f"--output={f}=biased.{f}" for f in ("npy", "npz", "safetensors", "pt")],
    )
    rows = json.loads(text)["outputs"]
    assert status == 1
    assert len({(r["verdict"], r["max_ulp"], r["typical_ratio"]) for r in rows}) == 1
    assert all(p["class"] == "identical" for p in json.loads(text)["pairs"])


def test_inputs_refuses_to_overwrite_or_to_write_into_results(linear_files, capsys):
    before = (linear_files / "lin.npz").read_bytes()
    status, _, err = run_main(capsys, "inputs", "linear", "--size", 64, "--save", "lin.npz")
    assert status == 2 and "already exists" in err and (linear_files / "lin.npz").read_bytes() == before
    assert run_main(capsys, "inputs", "linear", "--size", 64, "--save", "lin.npz", "--force")[0] == 0
    assert read_arrays(linear_files / "lin.npz")["x"].shape == (32, 64)

    (linear_files / "results" / "machine").mkdir(parents=True)
    status, _, err = run_main(capsys, "inputs", "linear", "--save", "results/machine/in.npz")
    assert status == 2 and "inside the results directory" in err
    (linear_files / "elsewhere").mkdir()
    (linear_files / "elsewhere" / "benchmarks.json").write_text("{}")
    status, _, err = run_main(capsys, "inputs", "linear", "--save", "elsewhere/in.npz")
    assert status == 2 and "inside the results directory" in err
    assert not list(linear_files.glob("*/in.npz")) and not list(linear_files.glob("*/*/in.npz"))


def test_inputs_are_saved_under_the_name_given(tmp_path):
    """np.savez appends .npz to a name spelled otherwise (in.NPZ -> in.NPZ.npz)."""
    path = write_arrays(tmp_path / "in.NPZ", {"x": np.ones(3, np.float32)})
    assert [p.name for p in tmp_path.iterdir()] == ["in.NPZ"]
    assert read_arrays(path)["x"].tolist() == [1, 1, 1]


def _bad_inputs(d):
    """Each kind of bad input: (what to write, the check arguments, a phrase the error says)."""
    z = dict(np.load(d / "lin.npz"))
    good = np.load(d / "numpy.npy")
    return {
        "missing file": (lambda: None, ["--output", "y=nowhere.npy"], "nowhere.npy: no such file"),
        "unreadable file": (
            lambda: (d / "junk.npy").write_bytes(b"not an array"),
            ["--output", "y=junk.npy"],
            "junk.npy: not a .npy file",
        ),
        "missing input name": (
            lambda: np.savez(d / "in.npz", x=z["x"], W=z["W"]),
            ["--output", "y=numpy.npy"],
            "missing b",
        ),
        "extra input name": (
            lambda: np.savez(d / "in.npz", **z, bias=z["b"]),
            ["--output", "y=numpy.npy"],
            "unexpected bias",
        ),
        "shape the op cannot take": (
            lambda: np.savez(d / "in.npz", x=z["x"], W=z["W"][:, :100], b=z["b"]),
            ["--output", "y=numpy.npy"],
            "cannot take inputs of shapes",
        ),
        "output of the wrong shape": (
            lambda: np.save(d / "short.npy", good[:5]),
            ["--output", "y=short.npy"],
            "short.npy: output has shape (5, 64)",
        ),
        "unsupported dtype": (
            lambda: np.save(d / "int.npy", good.astype(np.int32)),
            ["--output", "y=int.npy"],
            "int.npy: unsupported dtype int32",
        ),
        "inputs not in the output's format": (
            lambda: np.save(d / "half.npy", good.astype(np.float16)),
            ["--output", "y=half.npy"],
            "are not float16 numbers",
        ),
    }


BAD_INPUTS = (
    "missing file",
    "unreadable file",
    "missing input name",
    "extra input name",
    "shape the op cannot take",
    "output of the wrong shape",
    "unsupported dtype",
    "inputs not in the output's format",
)


@pytest.mark.parametrize("problem", BAD_INPUTS)
def test_each_bad_input_exits_2_with_one_line_and_writes_nothing(linear_files, capsys, problem):
    write, args, phrase = _bad_inputs(linear_files)[problem]
    write()
    inputs = "in.npz" if (linear_files / "in.npz").exists() else "lin.npz"
    files = sorted(p.name for p in linear_files.iterdir())
    status, out, err = run_main(capsys, "check", "linear", "--inputs", inputs, *args)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("opbench: error: ") and phrase in err, err
    assert sorted(p.name for p in linear_files.iterdir()) == files


def test_an_unknown_elementwise_output_is_held_to_the_generic_contract():
    x = make_case("exp", "float32", 64).inputs["x"]
    right = np.exp(x)
    report = accuracy.check(op="exp", inputs={"x": x}, outputs={"np": right})
    assert report.outputs[0]["verdict"] == WITHIN
    assert "contract of 3 ulp (generic contract for any exp: numpy" in report.outputs[0]["reason"]
    off = right.copy()
    for _ in range(5):  # 5 representable numbers away from numpy's result: more than 3 from the exact one
        off[7] = np.nextafter(off[7], np.float32(np.inf))
    row = accuracy.check(op="exp", inputs={"x": x}, outputs={"off": off}).outputs[0]
    assert row["verdict"] == "beyond rounding" and "outside its contract" in row["reason"]
    assert row["worst"]["index"] == [7]
    assert accuracy.check(op="exp", inputs={"x": x}, outputs={"off": off}, contract=8).within_rounding


def test_sqrt_is_held_to_correct_rounding():
    x = np.linspace(0.5, 4, 64, dtype=np.float32)
    assert accuracy.check(op="sqrt", inputs={"x": x}, outputs={"np": np.sqrt(x)}).within_rounding
    off = np.sqrt(x)
    off[3] = np.nextafter(off[3], np.float32(0))
    row = accuracy.check(op="sqrt", inputs={"x": x}, outputs={"off": off}).outputs[0]
    assert row["verdict"] == "beyond rounding" and "0 ulp" in row["reason"]


@pytest.mark.parametrize("op", all_ops(), ids=lambda op: op.name)
def test_the_correctly_rounded_result_of_every_op_is_within_rounding_on_its_saved_inputs(op, tmp_path):
    dtype = "float32" if "float32" in op.dtypes() else op.dtypes()[0]
    case = make_case(op.name, dtype, op.test_size)
    path = write_arrays(tmp_path / "in.safetensors", case.inputs)
    best = case.fmt.round(correctly_rounded(case.exact, case.fmt))
    report = accuracy.check(op=op.name, inputs=path, outputs={"best": best})
    assert report.outputs[0]["verdict"] == WITHIN, report.outputs[0]["reason"]
    assert report.outputs[0]["max_ulp"] <= 0.5


LAYER = """
import torch

def block(x, W, b):
    return torch.tanh(torch.nn.functional.linear(x, W, b))

def block_np(x, W, b):
    import numpy as np
    return np.tanh(x @ W.T + b)
"""


def test_fn_judges_a_two_op_torch_function_and_given_outputs(linear_files, capsys):
    (linear_files / "mylayer.py").write_text(textwrap.dedent(LAYER))
    z = read_arrays("lin.npz")
    np.save("tf_like.npy", np.tanh(z["x"] @ z["W"].T + z["b"]))
    np.save("wrong.npy", np.tanh(z["x"] @ z["W"].T + z["b"] * np.float32(1.01)))
    status, out, _ = run_main(
        capsys, "check", "--fn", "mylayer:block", "--inputs", "lin.npz", "--output", "numpy=tf_like.npy", "--json"
    )
    report = json.loads(out)
    assert status == 0, out
    assert report["op"] == "mylayer:block" and [o["label"] for o in report["outputs"]] == ["block@float32", "numpy"]
    assert all(
        "typical tier, derived as for registry ops: its torch ops with sampled roundings in float32; scale = "
        "max(first-order RMS error of its sampled roundings (what 64 Monte Carlo runs estimate), its own float32 "
        "result's error) against its float64 evaluation, "
        "flagged above 12x scale + 1 ulp" in o["reason"]
        for o in report["outputs"]
    )
    status, out, _ = run_main(
        capsys, "check", "--fn", "mylayer:block", "--inputs", "lin.npz", "--output", "wrong=wrong.npy"
    )
    assert status == 1 and re.search(r"^wrong +beyond rounding", out, re.M)  # 2.6e6 ulp: no rounding gives that


def test_fn_with_numpy_uses_the_emulated_typical_tier(linear_files):
    import sys

    sys.path.insert(0, str(linear_files))
    (linear_files / "mylayer_np.py").write_text(textwrap.dedent(LAYER))
    try:
        report = accuracy.check(fn="mylayer_np:block_np", inputs="lin.npz")
    finally:
        sys.path.remove(str(linear_files))
    assert report.within_rounding
    assert "its formula emulated in float32" in report.outputs[0]["reason"]


def test_assert_within_rounding_passes_and_fails_as_it_should():
    case = make_case("linear", "float32", 64)
    x, W, b = (case.inputs[k] for k in ("x", "W", "b"))
    assert_within_rounding(
        torch.nn.functional.linear(*map(torch.from_numpy, (x, W, b))), op="linear", inputs=case.inputs
    )
    with pytest.raises(AssertionError, match=r"actual: (suspicious|beyond rounding): .*worst element \["):
        assert_within_rounding(x @ W.T + b * np.float32(1.01), op="linear", inputs=case.inputs)

    def block(x, W, b):
        return torch.tanh(torch.nn.functional.linear(x, W, b))

    assert_within_rounding(np.tanh(x @ W.T + b), fn=block, inputs=case.inputs)
    # a bias 1% off: past the most any rounding of the block's ops can give, not only atypical
    with pytest.raises(AssertionError, match=r"actual: beyond rounding: .*the most any rounding of its ops can give"):
        assert_within_rounding(np.tanh(x @ W.T + b * np.float32(1.01)), fn=block, inputs=case.inputs)


def test_fn_typical_tier_derives_the_same_threshold_for_torch_and_numpy():
    """One formula written in torch (ATen ops with sampled roundings, its own result as the
    deterministic run) and in numpy (the formula emulated, a round-to-nearest run as the
    deterministic one): the typical tier's threshold comes out the same, as typical.py derives it."""
    inputs = make_case("linear", "float32", LINEAR_SIZE).inputs
    pairs = [
        (lambda x, W, b: torch.tanh(torch.nn.functional.linear(x, W, b)), lambda x, W, b: np.tanh(x @ W.T + b)),
        (lambda x, W, b: torch.sum(x * 2, -1), lambda x, W, b: (x * 2).sum(-1)),
        (lambda x, W, b: torch.exp(x).mean(-1), lambda x, W, b: np.exp(x).mean(-1)),
    ]
    for torch_fn, numpy_fn in pairs:
        by_torch, by_numpy = (accuracy.check(fn=f, inputs=inputs).outputs[0] for f in (torch_fn, numpy_fn))
        assert by_torch["verdict"] == by_numpy["verdict"] == WITHIN
        # measured 15.0 / 15.0, 59.0 / 59.0 and 39.0 / 43.5 ulp
        assert 0.8 < by_torch["threshold_ulp"] / by_numpy["threshold_ulp"] < 1.25, (by_torch, by_numpy)
        assert "torch ops with sampled roundings" in by_torch["reason"]
        assert "formula emulated" in by_numpy["reason"]


def _converting_block(x, W, b):
    """The common shape of a torch function a user checks: it converts whatever it is given."""
    x, W, b = map(torch.as_tensor, (x, W, b))
    return torch.tanh(torch.nn.functional.linear(x, W, b))


def _block(x, W, b):
    return torch.tanh(torch.nn.functional.linear(x, W, b))


def test_fn_that_converts_its_inputs_is_judged_as_the_torch_function_it_is():
    """Issue 22 #3: numpy arrays went in, torch computed, and the emulation of a numpy formula was
    asked to follow it: every output was undetermined. The same verdicts as without conversion."""
    x, W, b = (make_case("linear", "float32", LINEAR_SIZE).inputs[k] for k in ("x", "W", "b"))
    good = np.tanh(x.astype(np.float64) @ W.T.astype(np.float64) + b).astype(np.float32)
    outputs = {"good": good, "scaled bias": np.tanh(x @ W.T + b * np.float32(1.01))}
    inputs = {"x": x, "W": W, "b": b}
    converting, plain = (
        accuracy.check(fn=f, inputs=inputs, outputs=outputs).outputs for f in (_converting_block, _block)
    )
    assert [o["verdict"] for o in converting] == [o["verdict"] for o in plain] == [WITHIN, WITHIN, "beyond rounding"]
    assert [o["threshold_ulp"] for o in converting] == [o["threshold_ulp"] for o in plain]
    assert all("torch ops with sampled roundings" in o["reason"] for o in converting)


def _float32_layer_norm(x, w, b, eps):
    """Another correct float32 layer norm than torch's kernel: numpy's two passes, each op in float32."""
    mean = x.mean(-1, keepdims=True, dtype=np.float32)
    deviations = x - mean
    variance = (deviations * deviations).mean(-1, keepdims=True, dtype=np.float32)
    return deviations / np.sqrt(variance + np.float32(eps)) * w + b


@settings(deadline=None, max_examples=25)
@given(
    mean=st.sampled_from([0.0, 1.0, -30.0, 1e3]),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
    width=st.sampled_from([8, 64, 384]),
    seed=st.integers(0, 2**16),
)
def test_fn_a_fused_kernel_is_modelled_by_its_decomposition_so_another_correct_one_is_within(mean, scale, width, seed):
    """A layer norm judged as a torch function: its typical tier took aten.native_layer_norm as one
    rounding, so every element's allowance came from torch's own result, and BERT's LayerNorm on a
    GPU was 'suspicious' (1.03x; docs/gpu.md). Its decomposition's sums are now modelled: another
    correct float32 evaluation, on inputs of any mean and spread, is within rounding."""
    rng = np.random.default_rng(seed)
    x = (mean + scale * rng.standard_normal((4, width))).astype(np.float32)
    w, b = (rng.uniform(0.5, 1.5, width).astype(np.float32), rng.uniform(-0.5, 0.5, width).astype(np.float32))
    eps = 1e-12  # BERT's: not the registry op's 1e-5, so judged as a function

    def layer(x):
        return torch.nn.functional.layer_norm(
            x, (width,), torch.from_numpy(w).to(x.dtype), torch.from_numpy(b).to(x.dtype), eps
        )

    report = accuracy.check(fn=layer, inputs={"x": x}, outputs={"numpy": _float32_layer_norm(x, w, b, eps)})
    row = next(o for o in report.outputs if o["label"] == "numpy")
    assert row["verdict"] == WITHIN, row
    assert "one rounding" not in row["reason"]


def test_inf_and_nan_inputs_are_data_the_finite_part_is_judged(tmp_path, capsys, monkeypatch):
    """Inf or NaN in x reached the exact GEMM as a traceback. The output rows they reach must carry
    the float64 evaluation's inf and NaN; the others are judged for rounding as before."""
    rng = np.random.default_rng(0)
    x, w, b = (rng.normal(size=s).astype(np.float32) for s in ((8, 16), (4, 16), (4,)))
    x[2, 3], x[5, 1] = np.inf, np.nan
    np.savez(tmp_path / "lin.npz", x=x, W=w, b=b)
    y = (x.astype(np.float64) @ w.T.astype(np.float64) + b).astype(np.float32)  # rounded once: correct
    np.save(tmp_path / "y.npy", y)
    wrong = y.copy()
    wrong[2, 0] = 1.0  # a finite value where the float64 evaluation is inf or NaN
    np.save(tmp_path / "wrong.npy", wrong)
    monkeypatch.chdir(tmp_path)
    status, out, _ = run_main(capsys, "check", "linear", "--inputs", "lin.npz", "--output", "y=y.npy", "--json")
    (row,) = json.loads(out)["outputs"]
    assert status == 0 and row["verdict"] == WITHIN and row["max_ulp"] <= 0.5
    assert (
        "8 output element(s) depend on non-finite inputs (x: 2): they carry the float64 evaluation's inf and NaN"
        in row["reason"]
    )
    status, out, _ = run_main(capsys, "check", "linear", "--inputs", "lin.npz", "--output", "w=wrong.npy", "--json")
    (row,) = json.loads(out)["outputs"]
    assert status == 1 and row["verdict"] == "beyond rounding"
    assert "1 of them are not the inf or NaN of the float64 evaluation there" in row["reason"]
