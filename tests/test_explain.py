"""`explain`: verdicts, pair classes and reproducibility on real ops; and determinism of Case."""

from __future__ import annotations

import numpy as np
import pytest

from accuracy.dtypes import get_format
from accuracy.evaluate import Case, make_case
from accuracy.errors import OpbenchError
from accuracy.exact import Exact
from accuracy.explain import explain
from accuracy.registry import get_op


def _rows(report):
    return {r["impl"]: r for r in report["implementations"]}


def _pair(report, a, b):
    for p in report["pairs"]:
        if {p["a"], p["b"]} == {a, b}:
            return p
    raise AssertionError(f"no pair {a} / {b}")


@pytest.fixture(scope="module")
def linear32():
    return explain("linear", "float32")


def test_linear_spellings_differ_but_both_within_rounding(linear32):
    rows = _rows(linear32)
    a, b = "torch:F.linear", "torch:x @ W.T + b"
    assert rows[a]["verdict"] == rows[b]["verdict"] == "within rounding"
    assert 0 < rows[a]["bound_ratio"] <= 1 and 0 < rows[b]["bound_ratio"] <= 1
    p = _pair(linear32, a, b)
    assert p["class"] == "within rounding"
    assert p["differing_elements"] > 0 and p["max_ulp_apart"] > 0
    assert linear32["size"] == get_op("linear").default_size
    for r in linear32["reproducibility"]:
        assert r["run_to_run"] is True, r


def test_pair_classes_are_consistent(linear32):
    rows = _rows(linear32)
    for p in linear32["pairs"]:
        if p["differing_elements"] == 0:
            assert p["class"] == "identical"
        elif rows[p["a"]]["verdict"] == rows[p["b"]]["verdict"] == "within rounding":
            assert p["class"] == "within rounding"
        else:
            assert p["class"] == "beyond rounding"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_std_ddof0_is_beyond_rounding(dtype):
    report = explain("std", dtype)
    rows = _rows(report)
    good, bad = "numpy:np.std(x, ddof=1)", "numpy:np.std(x)"
    assert rows[good]["verdict"] == "within rounding"
    assert rows["torch:torch.std(x)"]["verdict"] == "within rounding"
    assert rows[bad]["verdict"] == "beyond rounding"
    assert rows[bad]["bound_ratio"] > 1
    assert _pair(report, good, bad)["class"] == "beyond rounding"
    n = report["size"]
    # ddof=0 vs 1 scales std by sqrt((n-1)/n): the relative error is about 1/(2n)
    assert rows[bad]["max_rel_exact"] == pytest.approx(1 - np.sqrt((n - 1) / n), rel=1e-3)
    assert all(r["run_to_run"] for r in report["reproducibility"])


def test_naive_sigmoid_float16_beyond_rounding_torch_within():
    report = explain("sigmoid", "float16")
    rows = _rows(report)
    assert rows["torch:torch.sigmoid"]["verdict"] == "within rounding"
    assert rows["torch:torch.sigmoid"]["max_ulp"] <= 1.0
    assert rows["numpy:1/(1+exp(-x))"]["verdict"].startswith("beyond rounding")
    assert _pair(report, "torch:torch.sigmoid", "numpy:1/(1+exp(-x))")["class"] == "beyond rounding"
    assert all(r["run_to_run"] for r in report["reproducibility"])


def test_explain_rejects_bad_arguments():
    with pytest.raises(OpbenchError, match="unknown op"):
        explain("nosuchop")
    with pytest.raises(OpbenchError, match="unknown dtype"):
        explain("linear", "float8")
    with pytest.raises(OpbenchError, match="size"):
        make_case("linear", "float32", 0)
    with pytest.raises(OpbenchError):
        make_case("erf", "float16").op.impl("numpy:np.erf")


@pytest.mark.parametrize("op_name,dtype,impl", [
    ("linear", "float32", "torch:F.linear"),
    ("sum", "float16", "torch:torch.sum"),
    ("softmax", "bfloat16", "torch:torch.softmax"),
    ("std", "float64", "numpy:np.std(x)"),
])
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
    from accuracy.registry import all_ops

    return [pytest.param(op.name, c, id=f"{op.name}-{c}") for op in all_ops() for c in op.condition_names()]


@pytest.mark.parametrize("op_name,condition", _every_op_and_condition())
def test_explain_works_on_every_op(op_name, condition):
    op = get_op(op_name)
    dtype = "float32" if "float32" in op.dtypes() else op.dtypes()[0]
    report = explain(op_name, dtype, min(16, op.default_size), 1, condition)
    assert report["condition"] == condition
    verdicts = {r["impl"]: r["verdict"] for r in report["implementations"]}
    assert verdicts and "error" not in verdicts.values(), verdicts
    # bitwise reproducibility is a finding, not a promise (torch's lstsq can differ run to run);
    # what is promised is that every implementation is checked
    assert {r["impl"] for r in report["reproducibility"]} == set(verdicts)
