"""Where the report and the model page are written: never through a link, never over a user's
directory, never half a file (issue 40 items 1 to 3)."""

from __future__ import annotations

import errno
import os

import pytest
from fixtures_report import make_one_result_dir

from accuracy.core.errors import OpbenchError
from accuracy.report.model_page import write_model_page
from accuracy.report.render import write_report
from accuracy.workflows.model.report import ModelReport

MODEL_REPORT = ModelReport("tiny", "eval", {}, [])


@pytest.mark.parametrize("target", ["elsewhere.html", "victim.html"])
def test_model_page_is_never_written_through_a_link(tmp_path, target):
    victim = tmp_path / "victim.html"
    victim.write_text("keep me")
    (tmp_path / "page.html").symlink_to(tmp_path / target)
    with pytest.raises(OpbenchError, match="symbolic link"):
        write_model_page(tmp_path / "page.html", MODEL_REPORT)
    assert victim.read_text() == "keep me" and not (tmp_path / "elsewhere.html").exists()


def test_model_page_onto_a_full_disk_leaves_nothing_behind(tmp_path, monkeypatch):
    def full_disk(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OpbenchError, match=r"page\.html: No space left on device"):
        write_model_page(tmp_path / "page.html", MODEL_REPORT)
    assert list(tmp_path.iterdir()) == []


def test_a_report_never_replaces_a_users_directory(tmp_path):
    results = make_one_result_dir(tmp_path / "in")
    out = tmp_path / "out"
    thesis = out / "thesis"
    thesis.mkdir(parents=True)
    (thesis / "chapter1.tex").write_text("\\chapter{Results}")
    with pytest.raises(OpbenchError, match="opbench did not create"):
        write_report(results, out, "thesis")
    assert [p.name for p in thesis.iterdir()] == ["chapter1.tex"]
    first = write_report(results, out, "latest")
    assert first.is_file()
    assert write_report(results, out, "latest") == first  # its own directory is replaced
    assert sorted(p.name for p in out.iterdir()) == ["latest", "thesis"]


def test_model_page_into_a_missing_directory_is_one_line(tmp_path):
    """Issue 40 item 19: `--html` into a missing directory was a FileNotFoundError traceback after the run."""
    with pytest.raises(OpbenchError, match=r"cannot write .*nowhere/page\.html: No such file or directory"):
        write_model_page(tmp_path / "nowhere" / "page.html", MODEL_REPORT)
    assert list(tmp_path.iterdir()) == []
