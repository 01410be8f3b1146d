"""One path per concern in what the CLI prints: one number formatter, one warning helper, one line
on max rel beside max ulp where tiny outputs make it large."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from accuracy.core.errors import warn
from accuracy.core.formatting import format_number
from accuracy.workflows.evaluation import make_case
from accuracy.workflows.explain import relative_gap_note

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "value,text",
    [
        (0.29638671875, "0.296"),
        (65536.0, "65536"),  # a size in full, not 6.55e+04
        (4096, "4096"),
        (1.5e-7, "1.5e-07"),
        (2.0, "2"),
        (float("nan"), "-"),
        (None, "-"),
        (pd.NA, "-"),
        (np.float32(0.125), "0.125"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def test_format_number_digits_and_missing():
    assert format_number(3.14159265, digits=4) == "3.142"
    assert format_number(float("nan"), missing="") == ""


def test_warn_is_one_line_on_stderr(capsys):
    warn("plugin 'x' left out: no module")
    out, err = capsys.readouterr()
    assert out == "" and err == "opbench: warning: plugin 'x' left out: no module\n"


def test_warnings_are_written_by_the_helper_alone():
    """No module writes an `opbench: warning:` line by hand: they all go through core.errors.warn."""
    pattern = re.compile(r"opbench: warning:")
    by_hand = [
        str(path.relative_to(ROOT))
        for folder in ("accuracy", "benchmarks", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if pattern.search(path.read_text()) and path != ROOT / "accuracy" / "core" / "errors.py"
    ]
    assert by_hand == []


def test_max_rel_beside_max_ulp_is_explained_by_tiny_outputs():
    """softmax float16: torch's result errs at most half an ulp, yet its max rel is ~0.3,
    at an output below float16's smallest normal; float32 outputs of exp stay normal: no note."""
    case = make_case("softmax", "float16")
    impl = case.op.impl("torch:torch.softmax", "float16")
    output = case.run(impl, 1)
    summary = case.measure(impl, output)
    note = relative_gap_note(output, case.exact, case.fmt, summary)
    assert summary.max_ulp < 0.51 and summary.max_rel_exact > 0.1
    value = float(re.search(r"at an output of (\S+),", note).group(1))
    assert 0 < value < 2.0**-14 and "below float16's smallest normal 6.1e-05" in note
    exp = make_case("exp", "float32", 256)
    exp_impl = exp.op.impl("numpy:np.exp", "float32")
    out = exp.run(exp_impl, 1)
    assert relative_gap_note(out, exp.exact, exp.fmt, exp.measure(exp_impl, out)) == ""
