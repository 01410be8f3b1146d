"""opbench scan: whole-format scans report what each implementation really does, by the numbers."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import mpmath
import numpy as np
import pytest

from accuracy.catalog.registry import all_ops, get_op
from accuracy.cli.main import main
from accuracy.core.dtypes import get_format
from accuracy.reference.hard_inputs import HARD_TO_ROUND, hard_inputs
from accuracy.workflows.scan import (
    all_inputs,
    as_rows,
    hex_of,
    sample_float64,
    scan,
    scan_class_name,
    scannable,
    zimmermann_table,
)


def test_all_inputs_cover_every_bit_pattern_once():
    x = all_inputs(get_format("float16"), 0, 1 << 16)
    assert x.dtype == np.float16 and np.unique(x.view(np.uint16)).size == 1 << 16
    assert hex_of(1.0, get_format("float32")) == "0x3f800000" and hex_of(-2.0, get_format("bfloat16")) == "0xc000"


def test_sqrt_float16_is_correctly_rounded_everywhere_and_keeps_its_contract():
    """numpy's float16 sqrt computes in float32 and rounds once more: 24 >= 2*11 + 2 bits, so the
    double rounding is innocuous and every one of the 2**16 results is correctly rounded."""
    op, fmt = get_op("sqrt"), get_format("float16")
    result = scan(op, fmt, [op.impl("numpy:np.sqrt")])
    row = as_rows(result)[0]
    assert result.done == 1 << 16 and row["checked"] == 1 << 16
    assert row["not_correctly_rounded"] == 0 and row["max_ulp"] == 0.0 and row["worst"] == []
    assert row["contract_max_ulp"] == 0 and row["contract_holds"] is True


def test_a_result_one_ulp_off_is_counted_and_its_input_reported():
    op, fmt = get_op("sqrt"), get_format("float16")

    def bumped(ns, x):  # sqrt(4) = 2 exactly: the one result bumped up by one ulp
        y = ns.sqrt(x)
        return np.where(x == 4, np.nextafter(np.float16(2), np.float16(3)), y)

    impl = replace(op.impl("numpy:np.sqrt"), variant="bumped", fn=bumped)
    row = as_rows(scan(op, fmt, [impl]))[0]
    assert row["not_correctly_rounded"] == 1 and row["max_ulp_from_correctly_rounded"] == 1
    assert row["worst"][0]["x"] == "0x4400" and row["worst"][0]["result"] == "0x4001"
    assert row["max_ulp"] == pytest.approx(1.0) and row["histogram"]["(0.5, 1]"] == 1
    assert row["contract_holds"] is None  # a variant nobody published a contract for


def test_the_worst_inputs_do_not_depend_on_the_chunks(monkeypatch):
    """A cluster scans in larger chunks than this process, and chunks finish in any order: among
    equal errors the first inputs are reported whatever the chunking. A negated exp errs by
    infinitely many ulps on every input that overflows: thousands of ties."""
    from accuracy.workflows import scan as scan_module

    run = scan_module._run
    monkeypatch.setattr(scan_module, "_run", lambda impl, x, fmt: -run(impl, x, fmt))
    op, fmt = get_op("exp"), get_format("float16")
    rows = [as_rows(scan(op, fmt, [op.impl("numpy:np.exp")], chunk=c, threads=1)) for c in (1024, 4096, 1 << 16)]
    assert rows[0] == rows[1] == rows[2]
    x = all_inputs(fmt, 0, 1 << 16)
    with np.errstate(all="ignore"):  # NaN inputs, overflow
        overflows = np.flatnonzero(np.isinf(np.exp(x.astype(np.float64)).astype(np.float16)) & np.isfinite(x))
    assert [w["x"] for w in rows[0][0]["worst"]] == [f"0x{i:04x}" for i in overflows[:3]]
    assert [w["ulp"] for w in rows[0][0]["worst"]] == [math.inf] * 3


def test_every_scannable_op_scans_bfloat16():
    """Each elementwise op of the registry, with its first implementation (all of them cost minutes)."""
    fmt = get_format("bfloat16")
    for op in all_ops():
        if not scannable(op) or fmt.name not in op.dtypes():
            continue
        impls = op.available_impls(fmt.name)[:1]
        rows = as_rows(scan(op, fmt, impls))
        assert [r["impl"] for r in rows] == [i.name for i in impls]
        assert all(r["checked"] == 1 << 16 and sum(r["histogram"].values()) == 1 << 16 for r in rows)


def test_float64_sample_is_deterministic_and_spans_the_binades():
    x = sample_float64(5000, seed=3)
    assert x.tobytes() == sample_float64(5000, seed=3).tobytes()
    finite = np.abs(x[np.isfinite(x) & (x != 0)])
    assert finite.min() < 1e-300 and finite.max() > 1e300 and np.isnan(x).any() and np.isinf(x).any()


def test_zimmermann_table_is_function_by_implementation():
    rows = [
        {"op": "exp", "dtype": "float32", "impl": "numpy:np.exp", "max_ulp": 2.4, "not_correctly_rounded": 3},
        {"op": "exp", "dtype": "float32", "impl": "torch:torch.exp", "max_ulp": 0.0, "not_correctly_rounded": 0},
    ]
    rows.append({"op": "log", "dtype": "float32", "impl": "numpy:np.log", "max_ulp": 1.5, "not_correctly_rounded": 9})
    header, body = zimmermann_table(rows)
    assert header == ["function", "dtype", "numpy", "torch"]
    assert body == [["exp", "float32", "2.4", "0.5"], ["log", "float32", "1.5", ""]]


def test_scan_class_names_are_the_full_profiles_asv_classes():
    assert scan_class_name("log", "bfloat16") == "ScanLogBfloat16"


def test_cli_scan_json_and_bad_input(capsys):
    assert main(["scan", "sin", "--dtype", "float16", "--json"]) == 0  # sin: no framework to import
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"] == out["total"] == 1 << 16 and not out["interrupted"]
    assert {r["impl"] for r in out["implementations"]} == {i.name for i in get_op("sin").available_impls("float16")}
    for argv in (
        ["scan", "exp", "--dtype", "float64"],
        ["scan", "matmul", "--dtype", "float16"],
        ["scan", "exp", "--dtype", "float16", "--sample", "10"],
        ["scan", "exp", "--impl", "numpy:nope"],
    ):
        assert main(argv) == 2
        assert capsys.readouterr().err.startswith("opbench: error: ")


def test_ctrl_c_prints_the_partial_table_and_exits_2(monkeypatch, capsys):
    """Ctrl-C while the first chunk's progress is shown: that chunk is the partial table."""
    import accuracy.cli.scan_command as scan_command
    import accuracy.workflows.scan as scan_module

    def interrupted(self, done, total, seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(scan_module, "CHUNK", 1 << 14)
    monkeypatch.setattr(scan_command._Progress, "__call__", interrupted)
    assert main(["scan", "sqrt", "--dtype", "float16", "--impl", "numpy:np.sqrt"]) == 2
    captured = capsys.readouterr()
    assert "16384 of 65536 inputs (interrupted: partial)" in captured.out
    assert captured.out.split("\n")[4].split()[:2] == ["numpy:np.sqrt", "16384"]  # its table row
    assert "interrupted" in captured.err


def test_float64_sample_scan_runs():
    op = get_op("exp")
    rows = as_rows(scan(op, get_format("float64"), [op.impl("numpy:np.exp")], sample=2000))
    assert rows[0]["checked"] == 2000


def _midpoint_distance_ulps(fn, x: float) -> float:
    """|f(x) - nearest float64 midpoint| in float64 ulps, from 300-bit mpmath."""
    with mpmath.workprec(300):
        y = abs(fn(mpmath.mpf(x)))
        mantissa, _ = mpmath.frexp(y)  # y = mantissa * 2**e, mantissa in [0.5, 1)
        scaled = mantissa * 2**53
        return float(abs(scaled - mpmath.floor(scaled) - mpmath.mpf(0.5)))


@pytest.mark.parametrize("name", sorted(HARD_TO_ROUND))
def test_hard_to_round_inputs_really_lie_within_2_to_minus_40_ulp_of_a_midpoint(name):
    fn = getattr(mpmath, name)
    for x in hard_inputs(name)[: len(HARD_TO_ROUND[name])]:
        assert _midpoint_distance_ulps(fn, float(x)) < 2.0**-40, float(x).hex()


def test_the_float64_sample_starts_with_the_functions_hard_and_edge_inputs():
    exp_sample = sample_float64(200, name="exp")
    assert set(hard_inputs("exp")) <= set(exp_sample)
    with np.errstate(over="ignore"):
        edge = np.exp(hard_inputs("exp"))
    assert np.isinf(edge).any() and (edge[np.isfinite(edge)] > 1e308).any()  # both sides of overflow
    assert (edge[(edge > 0) & (edge < np.finfo(np.float64).tiny)]).size  # results in the subnormals
    sin_inputs = hard_inputs("sin")
    closest = math.ldexp(6381956970095103, 797)
    assert closest in sin_inputs
    with mpmath.workprec(4000):  # it is within 2**-60 of a multiple of pi/2
        r = mpmath.mpf(closest) % (mpmath.pi / 2)
        assert min(r, mpmath.pi / 2 - r) < mpmath.mpf(2) ** -60
    assert hard_inputs("erf").size == 0 and sample_float64(40).size == 40


def test_a_library_that_fails_mid_scan_is_one_line_naming_it(monkeypatch, capsys):
    """A scan of relu crashed with a traceback when torch.compile's first import deadlocked in two
    scan threads; whatever a library raises, the scan ends with one line that names it."""

    def broken(impl, x, fmt):
        raise RuntimeError("dynamo traceback line\nDeadlockError: deadlock detected by _ModuleLock('torch._dynamo')")

    monkeypatch.setattr("accuracy.workflows.scan._run", broken)
    assert main(["scan", "exp", "--dtype", "float16", "--impl", "numpy:np.exp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opbench: error: numpy:np.exp failed on inputs 0..")
    assert err.rstrip().endswith("RuntimeError: DeadlockError: deadlock detected by _ModuleLock('torch._dynamo')")
