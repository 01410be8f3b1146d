"""Inputs: deterministic across processes, rounded once, bit-identical across backends, and the
references are computed from the rounded values."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import mpmath
import numpy as np
import pytest

from accuracy.backends import get_backend
from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import ALL_DTYPES, get_format
from accuracy.reference.inputs import as_float64, make_inputs, rng_for, seed_for
from accuracy.workflows.evaluation import Case


def _digest(inputs: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(inputs):
        a = np.ascontiguousarray(inputs[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode() + a.tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inputs_cross_the_torch_backend_bit_for_bit(dtype):
    torch = pytest.importorskip("torch")
    fmt = get_format(dtype)
    backend = get_backend("torch")
    specials = fmt.round(
        np.array(
            [
                0.0,
                -0.0,
                fmt.smallest_subnormal,
                -fmt.smallest_subnormal,
                fmt.max_finite,
                -fmt.max_finite,
                np.inf,
                -np.inf,
                1 / 3,
            ]
        )
    )
    for op in all_ops():
        if dtype not in op.dtypes():
            continue
        for name, arr in {**make_inputs(op, 8, fmt), "specials": specials}.items():
            assert arr.dtype == fmt.np_dtype
            t = backend.to_native(arr)
            assert t.dtype == getattr(torch, dtype)
            assert tuple(t.shape) == arr.shape
            int_view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[arr.dtype.itemsize]
            assert t.view(int_view).numpy().tobytes() == arr.tobytes(), (op.name, name)
            back = backend.to_numpy(t, fmt)
            assert back.dtype == fmt.np_dtype
            assert back.tobytes() == arr.tobytes(), (op.name, name)
            np_back = get_backend("numpy").to_numpy(get_backend("numpy").to_native(arr), fmt)
            assert np_back.tobytes() == arr.tobytes()


def test_to_native_copies():
    get_format("float32")
    a = np.arange(4, dtype=np.float32)
    for name in ("numpy", "torch"):
        native = get_backend(name).to_native(a)
        native[0] = 42
        assert a[0] == 0, name


@pytest.mark.slow  # end to end: fresh Python processes
def test_seed_is_stable_across_processes():
    op = get_op("exp")
    here = {d: _digest(make_inputs(op, 64, get_format(d))) for d in ALL_DTYPES}
    code = (
        "import json, hashlib, numpy as np\n"
        "from accuracy.core.dtypes import get_format, ALL_DTYPES\n"
        "from accuracy.reference.inputs import make_inputs, seed_for\n"
        "from accuracy.catalog.registry import get_op\n"
        "from tests.workflows.test_inputs import _digest\n"
        "op = get_op('exp')\n"
        "print(json.dumps({'seed': seed_for('exp', 64),"
        " 'digests': {d: _digest(make_inputs(op, 64, get_format(d))) for d in ALL_DTYPES}}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different hash() salt must not matter
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True, timeout=120
    )
    there = json.loads(out.stdout)
    assert there["seed"] == seed_for("exp", 64)
    assert there["digests"] == here


def test_seeds_differ_per_op_and_size():
    assert seed_for("exp", 64) != seed_for("exp", 65)
    assert seed_for("exp", 64) != seed_for("log", 64)
    a = rng_for("exp", 64).standard_normal(4)
    b = rng_for("exp", 64).standard_normal(4)
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inputs_are_rounded_once_from_float64(dtype):
    fmt = get_format(dtype)
    for op in all_ops():
        raw = op.generate(rng_for(op.name, 16), 16)
        got = make_inputs(op, 16, fmt)
        assert sorted(raw) == sorted(got)
        for name in raw:
            assert raw[name].dtype == np.float64
            want = fmt.round(raw[name])
            assert got[name].dtype == fmt.np_dtype
            assert got[name].tobytes() == want.tobytes(), (op.name, name)
            # each rounded value is the nearest value of fmt to the float64 one
            err = np.abs(got[name].astype(np.float64) - raw[name])
            from accuracy.core.dtypes import ulp

            assert np.all(err <= ulp(raw[name], fmt) / 2), (op.name, name)


def test_as_float64_is_exact():
    fmt = get_format("bfloat16")
    x = make_inputs(get_op("exp"), 64, fmt)
    x64 = as_float64(x)
    assert x64["x"].dtype == np.float64
    assert fmt.round(x64["x"]).tobytes() == x["x"].tobytes()


def test_exact_reference_is_of_the_rounded_inputs():
    """For exp in float16 the reference is exp(x16), not exp(x) of the unrounded float64 x."""
    op = get_op("exp")
    fmt = get_format("float16")
    case = Case(op, fmt, 32)
    raw = op.generate(rng_for("exp", 32), 32)["x"]
    x16 = case.inputs["x"].astype(np.float64)
    assert np.any(x16 != raw)
    with mpmath.workprec(200):
        of_rounded = np.array([float(mpmath.exp(mpmath.mpf(float(v)))) for v in x16])
        of_raw = np.array([float(mpmath.exp(mpmath.mpf(float(v)))) for v in raw])
    ref16 = fmt.round(case.exact.hi)
    assert ref16.tobytes() == fmt.round(of_rounded).tobytes()
    # and it is not the exp of the unrounded inputs (which differ by several float16 ulps)
    assert np.count_nonzero(ref16 != fmt.round(of_raw)) > len(raw) // 4
    assert np.all(np.abs(case.exact.hi - of_rounded) <= 4 * np.spacing(of_rounded))
