"""Input conditions: on hard inputs (ill-conditioned matrices, cancelling sums) the raw error grows far
beyond the random inputs' while the bound ratio still calls it rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import get_format
from accuracy.workflows.evaluation import Case


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("op", [op.name for op in all_ops() if "ill" in op.conditions])
def test_illcond_has_larger_error_but_stays_within_bound(op, backend):
    f64 = get_format("float64")
    errors = {}
    for condition in ("random", "ill"):
        case = Case(get_op(op), f64, 32, condition)
        impl = next(i for i in case.op.impls if i.backend == backend and i.stable)
        out = case.run(impl)
        assert case.measure(impl, out).bound_ratio <= 1.0
        errors[condition] = np.max(np.abs(out - case.exact.hi) / np.max(np.abs(case.exact.hi)))
    assert errors["ill"] > 100 * errors["random"]


def test_sum_cancel_relative_error_large_but_within_bound():
    case = Case(get_op("sum"), get_format("float32"), 1 << 12, "cancelling")
    impl = get_op("sum").impl("torch:torch.sum")
    out = case.run(impl)
    rel = abs(float(out) - float(case.exact.hi)) / abs(float(case.exact.hi))
    assert rel > 1e-5  # far beyond float32's u relative
    assert case.measure(impl, out).bound_ratio <= 1.0
    assert math.isfinite(rel)
