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
from collections.abc import Collection
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


def refile(results_file: Path, old: str, new: str, benchmarks: Collection[str]) -> Path:
    """Copy `benchmarks`' results from a staged file asv wrote under the `old` label into the `new`
    label's file (made, or merged into the one holding earlier benchmarks of that commit and
    stack); return the new file. The old file's other benchmarks were never this run's: the
    staged old file is left as it is, and is not saved.

    A batch timed while the stack's last fingerprint named it `old`, whose fresh fingerprint says
    `new`, measured the stack `new` names: a rerun would file the same numbers there."""
    from asv.results import get_filename

    data = json.loads(results_file.read_text())
    data["env_name"] = data["env_name"].replace(old, new)
    data["python"] = data["params"]["python"] = python_label(new)
    ours = {name: row for name, row in data["results"].items() if name in benchmarks}
    target = results_file.parents[1] / get_filename(results_file.parent.name, data["commit_hash"], data["env_name"])
    there = json.loads(target.read_text()) if target.is_file() else {}
    earlier = there.get("results", {}) if there.get("result_columns") == data["result_columns"] else {}
    write_atomic(target, json.dumps(data | {"results": earlier | ours}))
    return target


def relabel_python(results_file: Path, label: str) -> None:
    """Put `python_label` where asv wrote the wrapper's path (the results file's `python` and
    its `params`, which asv's pages draw as the legend and the sidebar); nothing else changes."""
    data = json.loads(results_file.read_text())
    data["python"] = data["params"]["python"] = python_label(label)
    write_atomic(results_file, json.dumps(data))
