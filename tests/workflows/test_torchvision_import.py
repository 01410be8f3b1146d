"""accuracy.workflows.model.torchvision_import beside a torchvision whose import guards every registration
(#56: 0.29.2 beside torch 2.15.0 in a port's own environment). Its C++ library does not load by
torch.ops.load_library, yet it imports plainly and registers `torchvision::nms` itself: defining
that schema first made the import a duplicate registration (in C++, an abort of the process). A
stand-in package of that kind, in a Python of its own (the registry is per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from accuracy.workflows.model.ports.child_process import PACKAGE

GUARDED = textwrap.dedent(
    """
    import torch

    _library = torch.library.Library("torchvision", "DEF")
    _library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    __version__ = "guarded"
    """
)
IMPORT = (
    "from accuracy.workflows.model.torchvision_import import import_torchvision; "
    "print(import_torchvision().__version__)"
)


@pytest.mark.slow  # a Python of its own with torch: seconds
def test_a_torchvision_that_imports_plainly_is_imported_without_the_schemas(tmp_path):
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(GUARDED)
    run = subprocess.run(
        [sys.executable, "-c", IMPORT],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{PACKAGE.parent}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "guarded"
