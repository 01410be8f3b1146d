"""The `.fingerprint` file opbench saves beside each asv results file: where it is, the one reader
that checks it belongs to the results beside it, and the stack label its contents give.

Both `opbench run` (which saves the pair and names its environment by the label) and the report
(which reads them back) need this, so it lives below both; there is one reader, and every caller
gets a fingerprint only when its recorded results digest matches the results file.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from accuracy.core.errors import OpbenchError
from accuracy.core.files import check_regular, read_json

FINGERPRINT_SUFFIX = ".fingerprint"  # not .json: asv reads every .json in a machine folder
PENDING_SUFFIX = ".pending"  # `opbench run` writes X.fingerprint.pending, then X.json, then renames
RESULTS_DIGEST = "results_sha256"  # in each fingerprint: the results file it belongs to
# `opbench run` in this environment runs asv through a Python at .asv/python/env-<digest>/python,
# so asv's environment name (the path, with / as _) carries the stack's label: one machine, one
# environment per stack (accuracy.run.environment_python)
ENV_LABEL = re.compile(r"_(env-[0-9a-f]{8})_python$")


def results_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _file_digest(path: Path) -> str:
    """The digest of a results file, read only if it is a regular file of a sane size."""
    check_regular(path)
    try:
        return results_digest(path.read_bytes())
    except OSError as exc:
        raise OpbenchError(f"cannot read {path}: {exc.strerror or exc}") from None


def _recorded_digest(path: Path) -> object:
    """The results digest a fingerprint file records; None if it records none or is unreadable."""
    try:
        data = read_json(path)
    except OpbenchError:
        return None
    return data.get(RESULTS_DIGEST) if isinstance(data, dict) else None


def fingerprint_path(result_path: Path) -> Path:
    """The fingerprint that belongs to the results file as it is now.

    A save interrupted between the results rename and the fingerprint rename leaves the new
    results beside the old X.fingerprint and the new X.fingerprint.pending: the recorded digest
    of the results picks the right one, so a results file is never read with another run's stack.
    """
    committed = result_path.with_suffix(FINGERPRINT_SUFFIX)
    pending = committed.with_name(committed.name + PENDING_SUFFIX)
    if not pending.exists():
        return committed
    try:
        digest = _file_digest(result_path)
    except OpbenchError:
        return committed
    if committed.exists() and _recorded_digest(committed) == digest:
        return committed
    return pending if _recorded_digest(pending) == digest else committed


def load_fingerprint(result_path: Path) -> dict[str, Any] | None:
    """The fingerprint saved with the results file at `result_path`; None when it has none.

    Raises OpbenchError (one line naming the file) for one that cannot be read (not a regular
    file, too big, not a JSON object) or that records the digest of other results (a save
    an interrupted run left half-done)."""
    path = fingerprint_path(result_path)
    if not path.exists() and not path.is_symlink():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise OpbenchError(f"{path}: not a fingerprint (a JSON object)")
    if RESULTS_DIGEST in data and data[RESULTS_DIGEST] != _file_digest(result_path):
        raise OpbenchError(f"{path}: the fingerprint of another save of {result_path.name} (an interrupted run)")
    return data


def fingerprint_digest(data: dict[str, Any], knobs: dict[str, str]) -> str:
    """A short digest of everything in a fingerprint that selects the numbers a run produces.

    Installed package versions, the Python, the BLAS libraries loaded (by file, version and
    kernel) and the process-start knobs; not thread counts or timestamps, which vary between
    identical environments. Equal digests: the same stack; any upgrade gives a new digest.
    """
    blas = [
        {k: entry.get(k) for k in ("internal_api", "version", "architecture", "threading_layer")}
        | {"file": Path(entry.get("filepath") or "").name}
        for entry in data.get("blas") or []
    ]
    providers = [
        {k: v for k, v in entry.items() if k not in ("num_threads", "threads")}
        for entry in (data.get("blas_providers") or {}).get("loaded", [])
    ]
    key = {
        "python": data.get("python"),
        "packages": data.get("packages"),
        "blas": sorted(blas, key=json.dumps),
        "providers": sorted(providers, key=lambda e: json.dumps(e, sort_keys=True, default=str)),
        "env": data.get("env"),
        "knobs": knobs,
        "error": data.get("error"),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:8]


def environment_label(data: dict[str, Any], knobs: dict[str, str]) -> str:
    """The short name of a stack (`env-3f2a9c1b`): what asv's pages and `opbench compare` show."""
    return f"env-{fingerprint_digest(data, knobs)}"


def label_of(env_name: str) -> str | None:
    """The stack label inside an asv environment name from `opbench run`, else None."""
    found = ENV_LABEL.search(env_name)
    return found.group(1) if found else None


def short_env_name(env_name: str) -> str:
    """How an environment is shown: its stack label, or asv's name where it has none (a history
    run's virtualenv, `virtualenv-py3.11-numpy2.4.6`)."""
    return label_of(env_name) or env_name


def read_load(result_path: Path) -> tuple[float, int] | None:
    """(the highest 1-minute load average seen while the run that wrote the file ran, the
    machine's CPU count), as `opbench run` records it; None for older or unreadable fingerprints."""
    try:
        data = load_fingerprint(result_path)
    except OpbenchError:
        return None
    load = data.get("load") if isinstance(data, dict) else None
    if not isinstance(load, dict):
        return None
    if not isinstance(load.get("max_1min"), (int, float)) or not isinstance(load.get("cpus"), int):
        return None
    return float(load["max_1min"]), load["cpus"]
