"""Every path ends in an answer, round 4 (issue 57): the paths that still ended in a traceback, a
lost file, a wrong answer or an unclear line, each run as a user meets it."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from cli_runner import run_main

from accuracy.workflows.array_files import write_arrays

SMALL_CNN = "accuracy.workflows.model.zoo:small_cnn"


def test_a_page_that_appears_during_the_run_is_kept_and_the_report_still_printed(tmp_path, capsys, monkeypatch):
    """--html FILE was checked absent before the run, then replaced at the end whatever was there:
    a file the user made meanwhile was lost (exit 0). And a page that could not be written cost
    the whole text report."""
    from accuracy.report import model_page

    page = tmp_path / "page.html"
    drawn = model_page.model_page

    def user_writes_first(report, answers):
        page.write_text("the user's own file")
        return drawn(report, answers)

    monkeypatch.setattr(model_page, "model_page", user_writes_first)
    status, out, err = run_main(capsys, "model", SMALL_CNN, "--inputs", "x=2x3x8x8", "--port", "threads:1", "--html", page)
    assert status == 2 and page.read_text() == "the user's own file"
    assert err.strip().splitlines()[-1] == (
        f"opbench: error: {page}: a file appeared there during the run; it is kept, not overwritten"
    )
    assert "threads:1 [float32]: every compared layer within rounding" in out  # the report, printed first
