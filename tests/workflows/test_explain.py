"""`explain`: verdicts, pair classes and reproducibility on real ops; and determinism of Case."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.core.errors import OpbenchError, first_line
from accuracy.reference.exact import Exact
from accuracy.workflows.evaluation import Case, make_case
from accuracy.workflows.explain import explain

# one worker evaluates the module's shared fixture once (make test runs pytest-xdist), and the same
# worker both explain's and the op self-test's: each runs every backend of its ops, and TensorFlow's
# and JAX's imports and compiles are then paid once (alone 27.4 + 19.7 CPU-s, together 35.5)
pytestmark = pytest.mark.xdist_group("every-backend")


def _rows(report):
    return {r["impl"]: r for r in report["implementations"]}


def _pair(report, a, b):
    for p in report["pairs"]:
        if {p["a"], p["b"]} == {a, b}:
            return p
    raise AssertionError(f"no pair {a} / {b}")


# The seed case is float32 at the op's default size; float64 at the README's 256, where the two
# spellings differ too (1,501 elements here), for 2 CPU-s instead of 11 at the default size
SEED_SIZES = {"float32": get_op("linear").default_size, "float64": 256}


@functools.cache  # xdist tears module fixtures down whenever a worker's queue runs dry: compute once
def _explained_linear(dtype: str) -> dict:
    return explain("linear", dtype, SEED_SIZES[dtype])


@pytest.fixture(scope="module", params=list(SEED_SIZES))
def linear(request):
    return _explained_linear(request.param)


@pytest.mark.slow
def test_seed_case_linear_spellings_differ_but_both_within_rounding(linear):
    """The seed case: F.linear and x @ W.T + b differ in bits, both are rounding."""
    rows = _rows(linear)
    a, b = "torch:F.linear", "torch:x @ W.T + b"
    assert rows[a]["verdict"] == rows[b]["verdict"] == "within rounding"
    assert 0 < rows[a]["bound_ratio"] <= 1 and 0 < rows[b]["bound_ratio"] <= 1
    assert 0 < rows[a]["typical_ratio"] <= 1 and 0 < rows[b]["typical_ratio"] <= 1
    assert "flags errors >= " in rows[a]["reason"] and rows[a]["threshold_ulp"] > 0
    p = _pair(linear, a, b)
    if linear["dtype"] == "float64" and p["differing_elements"] == 0:
        # where both spellings reach the same float64 BLAS kernel (as on some AVX-512 hosts), they agree
        assert p["class"] == "identical" and p["failing"] == []
    else:  # the seed case in float32: the bits differ, both are rounding
        assert p["class"] == "within rounding" and p["failing"] == []
        assert p["differing_elements"] > 0 and p["max_ulp_apart"] > 0
    assert linear["size"] == SEED_SIZES[linear["dtype"]]
    for r in linear["reproducibility"]:
        assert r["run_to_run"] is True, r


@pytest.mark.slow
def test_pair_classes_follow_both_verdicts(linear):
    rows = _rows(linear)
    severity = ["within rounding", "suspicious", "beyond rounding"]
    for p in linear["pairs"]:
        va, vb = rows[p["a"]]["verdict"], rows[p["b"]]["verdict"]
        if p["differing_elements"] == 0:
            assert p["class"] == "identical"
        elif "undetermined" in (va, vb):
            assert p["class"] == "undetermined"
        else:
            assert p["class"] == max(va, vb, key=severity.index)
            assert p["failing"] == [s for s, v in ((p["a"], va), (p["b"], vb)) if v != "within rounding"]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_std_ddof0_is_beyond_rounding_with_its_semantics_named(dtype):
    report = explain("std", dtype)
    rows = _rows(report)
    good, bad = "numpy:np.std(x, ddof=1)", "numpy:np.std(x)"
    assert rows["torch:torch.std(x)"]["verdict"] == "within rounding"
    assert rows[bad]["verdict"] == "beyond rounding"
    assert rows[bad]["label"] == "beyond rounding (semantics: ddof=0)"
    assert rows[bad]["reason"].startswith("semantics: ddof=0")
    pair = _pair(report, "torch:torch.std(x)", bad)
    assert pair["class"] == "beyond rounding" and pair["failing"] == [bad]
    if dtype != "float16":  # numpy's float16 std is computed in float16: its own error is larger
        assert rows[good]["verdict"] == "within rounding"
        n = report["size"]
        # ddof=0 vs 1 scales std by sqrt((n-1)/n): the relative error is about 1/(2n)
        assert rows[bad]["max_rel_exact"] == pytest.approx(1 - np.sqrt((n - 1) / n), rel=1e-3)
    assert all(r["run_to_run"] for r in report["reproducibility"])


@pytest.mark.slow  # ~7 s: explains many ops whole
def test_notes_never_contradict_verdicts():
    """A note that says "not a rounding difference" sits only beside a verdict that is not within."""
    for op_name, dtype in (("var", "float16"), ("std", "float32"), ("gelu", "float32")):
        for row in explain(op_name, dtype, threads=1)["implementations"]:
            if "not a rounding" in row["note"] or "different function" in row["note"]:
                assert row["verdict"] == "beyond rounding", row


def test_naive_sigmoid_float16_beyond_rounding_torch_within():
    report = explain("sigmoid", "float16")
    rows = _rows(report)
    assert rows["torch:torch.sigmoid"]["verdict"] == "within rounding"
    assert rows["torch:torch.sigmoid"]["max_ulp"] <= 1.0
    assert rows["numpy:1/(1+exp(-x))"]["verdict"] == "beyond rounding"
    pair = _pair(report, "torch:torch.sigmoid", "numpy:1/(1+exp(-x))")
    assert pair["class"] == "beyond rounding" and pair["failing"] == ["numpy:1/(1+exp(-x))"]
    assert all(r["run_to_run"] for r in report["reproducibility"])


def test_threads_compare_one_with_all_cores_whatever_the_main_run_used():
    from accuracy.core.threads import all_cores

    report = explain("matmul", "float32", 64, threads=1)
    cores = all_cores()
    case = make_case("matmul", "float32", 64)
    impls = {i.name: i for i in case.op.available_impls("float32")}
    assert [r["impl"] for r in report["reproducibility"]] == list(impls)
    for r in report["reproducibility"]:
        impl = impls[r["impl"]]
        # each thread count's verdict is that of the output at that count (every gemm here is within rounding)
        for threads, key in ((1, "verdict_1_thread"), (cores, f"verdict_{cores}_threads")):
            assert r[key] == case.judge(impl, case.run(impl, threads)).label == "within rounding", (r, threads)


def test_explain_rejects_bad_arguments():
    with pytest.raises(OpbenchError, match="unknown op"):
        explain("nosuchop")
    with pytest.raises(OpbenchError, match="unknown dtype"):
        explain("linear", "float8")
    with pytest.raises(OpbenchError, match="size"):
        make_case("linear", "float32", 0)
    with pytest.raises(OpbenchError):
        make_case("erf", "float16").op.impl("numpy:np.erf")


@pytest.mark.parametrize(
    "op_name,dtype,impl",
    [
        ("linear", "float32", "torch:F.linear"),
        ("sum", "float16", "torch:torch.sum"),
        ("softmax", "bfloat16", "torch:torch.softmax"),
        ("std", "float64", "numpy:np.std(x)"),
    ],
)
def test_measure_is_bitwise_deterministic(op_name, dtype, impl):
    op = get_op(op_name)
    size = 64 if op_name != "linear" else 256
    fmt = get_format(dtype)
    case = Case(op, fmt, size)
    first = case.measure(op.impl(impl)).as_dict()
    second = case.measure(op.impl(impl)).as_dict()
    third = Case(op, fmt, size).measure(op.impl(impl)).as_dict()  # fresh inputs and reference
    for other in (second, third):
        assert list(first) == list(other)
        for k in first:
            assert np.float64(first[k]).tobytes() == np.float64(other[k]).tobytes(), k


def test_a_reference_of_the_wrong_shape_is_an_error_not_a_measurement():
    case = make_case("gemv", "float32", 16)
    case.exact = Exact.from_float64(np.zeros((16, 1)))  # as a stale cache entry would be
    with pytest.raises(ValueError, match="shape"):
        case.measure(case.op.impl("numpy:a @ x"))


def _every_op_and_condition():
    from accuracy.catalog.registry import all_ops

    return [pytest.param(op.name, c, id=f"{op.name}-{c}") for op in all_ops() for c in op.condition_names()]


@pytest.mark.slow  # end to end: each op's every implementation, pairs and thread runs (~45 CPU-s, 9 compiled kernels)
@pytest.mark.parametrize("op_name,condition", _every_op_and_condition())
def test_explain_works_on_every_op(op_name, condition):
    op = get_op(op_name)
    dtype = "float32" if "float32" in op.dtypes() else op.dtypes()[0]
    # at the registry tests' size, whose exact references and compiled kernels it shares
    report = explain(op_name, dtype, op.test_size, 1, condition)
    assert report["condition"] == condition
    verdicts = {r["impl"]: r["verdict"] for r in report["implementations"]}
    assert verdicts and "error" not in verdicts.values(), verdicts
    # bitwise reproducibility is a finding, not a promise (torch's lstsq can differ run to run);
    # what is promised is that every implementation is checked
    assert {r["impl"] for r in report["reproducibility"]} == set(verdicts)


def test_an_implementation_that_raises_is_a_one_line_error_row(monkeypatch):
    """A library's message can start with a blank line and run on for pages (a C++ traceback):
    the row keeps its type and its first real line."""
    run = Case.run

    def failing(self, impl, threads):
        if impl.name == "numpy:np.sqrt":
            raise RuntimeError("\n  kernel failed: no float16 path\n  at sqrt_kernel.cpp:12\n")
        return run(self, impl, threads)

    monkeypatch.setattr(Case, "run", failing)
    row = _rows(explain("sqrt", "float16", 64, 1))["numpy:np.sqrt"]
    assert row["verdict"] == "error" and row["error"] == "RuntimeError: kernel failed: no float16 path"


@given(st.text())
def test_first_line_is_one_line_and_never_empty(message):
    line = first_line(ValueError(message))
    assert line and "\n" not in line and "\r" not in line
    assert first_line(ValueError(message), typed=True) in ("ValueError", f"ValueError: {line}")
