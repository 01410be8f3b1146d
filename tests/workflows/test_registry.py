"""Tests generated from the registry: every record is well formed, every (op, condition, implementation,
dtype) runs with the right shape and dtype, the float64 formulas and every stable implementation stay
within their bounds at the op's test size, and a few default spellings are within rounding at the
default size. The exact references are checked against their oracles in test_oracles.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from core_ops import CORE_OPS

from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import get_format
from accuracy.judge.error_metrics import bound_ratio
from accuracy.workflows.evaluation import Case
from accuracy.workflows.selftest import SLOW_BACKENDS

SAME_SHAPE_FAMILIES = ("elementwise", "activations", "norms")  # the output has x's shape


def _expected_shape(op, inputs) -> tuple | None:
    """The output shape, worked out from the inputs (not from the reference) for the ops it knows."""
    name = op.name
    if name in ("sum", "mean", "var", "std", "logsumexp", "dot"):
        return ()
    if name == "matmul":
        return (inputs["a"].shape[0], inputs["b"].shape[1])
    if name == "linear":
        return (inputs["x"].shape[0], inputs["W"].shape[0])
    if name == "gemv":
        return (inputs["a"].shape[0],)
    if name == "conv1d":
        x, w = inputs["x"], inputs["w"]
        return (x.shape[0], w.shape[0], x.shape[2] - w.shape[2] + 1)
    if op.family in SAME_SHAPE_FAMILIES:
        return inputs["x"].shape
    return None  # checked against its reference's shape (and the oracle's length, in test_oracles.py)


def test_catalog_records_are_well_formed():
    names = {op.name for op in all_ops()}
    assert names >= CORE_OPS
    assert len(names) == len(all_ops()) >= 40  # names are unique
    for op in all_ops():
        assert op.impls and op.dtypes()
        names = [i.name for i in op.impls]
        assert len(names) == len(set(names)), op.name
        assert op.default_size >= 1 and all(s >= 1 for s in op.bench_sizes)


def _cases():
    """Each (op, condition, dtype) twice where the self-test's SLOW_BACKENDS (torch.compile) have
    implementations: each compiles a C++ kernel with g++ (~2.7 CPU-s in a fresh environment, 21
    kernels at the test sizes), so they are a case of their own, left to `make test` (slow) and
    out of the edit loop."""
    cases = []
    for op in all_ops():
        for condition in op.condition_names():
            for dtype in op.dtypes():
                cases.append(pytest.param(op.name, condition, dtype, False, id=f"{op.name}@{condition}-{dtype}"))
                if any(impl.backend in SLOW_BACKENDS for impl in op.available_impls(dtype)):
                    compiled_id = f"{op.name}@{condition}-{dtype}-compiled"
                    cases.append(pytest.param(op.name, condition, dtype, True, id=compiled_id, marks=pytest.mark.slow))
    return cases


@pytest.mark.parametrize("op_name,condition,dtype,compiled", _cases())
def test_every_impl_runs_with_right_shape_dtype_and_within_bound(op_name, condition, dtype, compiled):
    """At the op's test size: the right shape and dtype, finite, and within the bound in float32 and
    float64, for every implementation but the deliberately naive (`stable=False`) and the semantic
    variants (`semantics`), which compute something else; and bitwise the same on a second call,
    unless declared `varies_run_to_run`."""
    op = get_op(op_name)
    fmt = get_format(dtype)
    case = Case(op, fmt, op.test_size, condition)
    expected = _expected_shape(op, case.inputs)
    impls = [impl for impl in op.available_impls(dtype) if (impl.backend in SLOW_BACKENDS) == compiled]
    assert impls, (op_name, dtype, compiled)
    for impl in impls:
        result = case.run(impl)
        assert isinstance(result, np.ndarray)
        if not impl.varies_run_to_run:
            assert case.run(impl).tobytes() == result.tobytes(), f"{impl.name} changed bits on a second call"
        assert result.dtype == fmt.np_dtype, impl.name
        assert result.shape == (expected if expected is not None else case.exact.shape), impl.name
        assert result.size == case.exact.hi.size  # the reference covers every output element
        if not impl.stable:  # a naive formula may overflow (exp(max x) in an unshifted logsumexp)
            continue
        assert np.all(np.isfinite(result.astype(np.float64))), impl.name
        assert case.measure(impl, result).nonfinite == 0, impl.name
        if dtype in ("float32", "float64") and not (impl.semantics or impl.finding):
            ratio = case.measure(impl, result).bound_ratio
            assert np.isnan(ratio) or ratio <= 1.0, (impl.name, ratio)


DECLARED_VARYING = [(op.name, impl.name) for op in all_ops() for impl in op.impls if impl.varies_run_to_run]


@pytest.mark.parametrize("op_name,impl_name", DECLARED_VARYING)
def test_an_implementation_declared_non_reproducible_still_changes_bits_from_call_to_call(op_name, impl_name):
    """A declaration that a newer library made stale would keep its implementation out of the
    self-test's calibration for nothing: within 50 calls it gives two different results."""
    op = get_op(op_name)
    (impl,) = [i for i in op.impls if i.name == impl_name]
    case = Case(op, get_format(impl.dtypes[0]), op.test_size)
    first = case.run(impl).tobytes()
    assert any(case.run(impl).tobytes() != first for _ in range(50)), impl.name


@pytest.mark.parametrize("op_name,condition", [(op.name, c) for op in all_ops() for c in op.condition_names()])
def test_fp64_reference_within_float64_bound(op_name, condition):
    """The float64 formula is itself a float64 computation: it must sit inside the float64 bound."""
    case = Case(get_op(op_name), get_format("float64"), get_op(op_name).test_size, condition)
    assert case.exact.shape == case.fp64.shape
    assert np.all(np.isfinite(case.exact.hi))
    assert bound_ratio(case.fp64, case.exact, case.evidence.bound(case.fmt)) <= 1.0


DEFAULTS = [
    pytest.param("linear", "torch:F.linear", marks=pytest.mark.slow),  # ~11 s: the default size's exact GEMM
    ("matmul", "numpy:a @ b"),
    ("matmul", "torch:torch.matmul"),
    ("gemv", "numpy:a @ x"),
    ("sum", "numpy:np.sum"),
    ("mean", "torch:torch.mean"),
    ("std", "numpy:np.std(x, ddof=1)"),
    ("var", "torch:torch.var(x)"),
    ("softmax", "torch:torch.softmax"),
    ("log_softmax", "torch:F.log_softmax"),
    ("logsumexp", "scipy:special.logsumexp"),
    ("layer_norm", "torch:F.layer_norm"),
    ("conv1d", "torch:F.conv1d"),
    ("exp", "numpy:np.exp"),
    ("tanh", "torch:torch.tanh"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op_name,impl_name", DEFAULTS)
def test_default_impl_within_rounding_at_default_size(op_name, impl_name, dtype):
    op = get_op(op_name)
    case = Case(op, get_format(dtype), op.default_size)
    result = case.run(op.impl(impl_name))
    summary = case.measure(op.impl(impl_name), result)
    assert summary.nonfinite == 0
    assert summary.bound_ratio <= 1.0, summary
    assert case.judge(op.impl(impl_name), result).verdict == "within rounding"
    assert summary.max_ulp >= 0 and math.isfinite(summary.max_ulp)
