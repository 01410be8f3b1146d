"""The Python asv runs this environment's benchmarks with: one per stack, so the stack is asv's
environment, not a second machine.

asv names an existing environment after its interpreter's path, and asv's pages show that path.
`opbench run` therefore hands asv a two-line wrapper at `.asv/python/env-<digest>/python` (the
digest of the stack's fingerprint) that execs this interpreter: a changed stack gets another
environment name, so its results go beside the old ones under the same machine, and each results
file's `python` reads `3.11 env-<digest>` instead of a path.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from accuracy.core.files import write_atomic

WRAPPERS = Path(".asv") / "python"  # beside asv's own .asv/env, relative to the asv config


def environment_python(config: Path, label: str) -> Path:
    """The wrapper for `label` beside `config` (written if missing or stale)."""
    path = config.resolve().parent / WRAPPERS / label / "python"
    script = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n'
    if not path.is_file() or path.read_text() != script:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, script)
        path.chmod(0o755)
    return path


def python_label(label: str) -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor} {label}"


def relabel_python(results_file: Path, label: str) -> None:
    """Put `python_label` where asv wrote the wrapper's path (the results file's `python` and
    its `params`, which asv's pages draw as the legend and the sidebar); nothing else changes."""
    data = json.loads(results_file.read_text())
    data["python"] = data["params"]["python"] = python_label(label)
    write_atomic(results_file, json.dumps(data))
