"""The random runs of a typical tier share their inputs and products (issue 41): the same numbers
as runs that share nothing, without copying and hashing the operands in every run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.judge import emulation
from accuracy.judge.emulation import emulate

FLOAT32 = get_format("float32")


def linear(x, W, b):
    return x @ W.T + b


def two_views(x, W, b):
    """Two products of other views of the same inputs: a key that ignored where in an input an
    operand starts, or its strides, would hand the second the first's moments."""
    return x @ W.T + x[::-1] @ W.T + b


def _inputs(rows: int, inner: int, cols: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    draw = lambda *shape: rng.standard_normal(shape).astype(np.float32).astype(np.float64)  # noqa: E731
    return {"x": draw(rows, inner), "W": draw(cols, inner), "b": draw(cols)}


def _runs(fn, inputs: dict, memo: dict | None, count: int = 4) -> list[np.ndarray]:
    return [emulate(fn, inputs, FLOAT32, "random", rng=np.random.default_rng([7, i]), memo=memo) for i in range(count)]


def from_the_bias(x, W, b):
    """The registry linear's working formula: products over concatenations of the inputs."""
    return get_op("linear").working_formula(x, W, b)


def writes_into_a_join(x, W, b):
    """A formula that scales a concatenation in place after its product: the shared
    concatenation is read-only, so the formula gets its own copies, as for its inputs."""
    joined = np.concatenate([x, x], axis=-1)
    y = joined @ np.concatenate([W, W], axis=1).T
    joined *= 2.0
    return y + joined[..., :1] + b


@pytest.mark.parametrize("formula", [linear, from_the_bias])
def test_runs_name_shared_inputs_and_their_joins_instead_of_comparing_them(monkeypatch, formula):
    """x @ W.T reads two shared inputs (W through its transpose), and the registry's linear their
    concatenations with the bias: the product's moments are computed once for all the runs, and
    no operand larger than the ones column is keyed by its values."""
    calls = {"moments": 0}
    largest = [0]
    moments, operand = emulation._Context._matmul_moments, emulation._Operand.__init__

    def counted_moments(self, a, b):
        calls["moments"] += 1
        return moments(self, a, b)

    def measured_operand(self, array):
        largest[0] = max(largest[0], array.size)
        operand(self, array)

    monkeypatch.setattr(emulation._Context, "_matmul_moments", counted_moments)
    monkeypatch.setattr(emulation._Operand, "__init__", measured_operand)
    _runs(formula, _inputs(16, 32, 8, 0), {}, count=8)
    assert calls == {"moments": 1}
    assert largest[0] <= 16


def test_operands_equal_in_value_but_not_in_sign_are_other_keys():
    zeros = np.zeros(4, dtype=emulation.CARRIER)
    assert emulation._Operand(zeros) == emulation._Operand(zeros.copy())
    assert emulation._Operand(zeros) != emulation._Operand(-zeros)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 6),
    inner=st.integers(1, 40),
    cols=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    formula=st.sampled_from([linear, two_views, from_the_bias, writes_into_a_join]),
)
def test_runs_naming_their_operands_are_bitwise_the_runs_keying_them_by_value(rows, inner, cols, seed, formula):
    inputs = _inputs(rows, inner, cols, seed)
    shared = _runs(formula, inputs, {})
    by_value = _runs(formula, inputs, {emulation._OWN_COPIES: True})  # operands keyed by their values
    assert all(np.array_equal(a, b) for a, b in zip(shared, by_value, strict=True))  # long double: padding varies


def test_a_formula_writing_into_its_input_gets_its_own_copies_with_the_same_draws():
    """A user's numpy function may scale its input in place: it is still emulated, every run
    reads the caller's values (unchanged), and its draws are those of runs given copies."""

    def in_place(x, W, b):
        x *= 2.0
        return x @ W.T + b

    inputs = _inputs(4, 24, 3, 1)
    before = {k: v.copy() for k, v in inputs.items()}
    shared = _runs(in_place, inputs, {})
    copies = _runs(in_place, inputs, {emulation._OWN_COPIES: True})
    assert all(r is not None for r in shared)
    assert all(np.array_equal(a, b) for a, b in zip(shared, copies, strict=True))
    assert all(np.array_equal(inputs[k], before[k]) for k in inputs)
    doubled = {**inputs, "x": 2.0 * inputs["x"]}
    assert np.allclose(shared[0].astype(np.float64), linear(**doubled), rtol=1e-5, atol=1e-5)
