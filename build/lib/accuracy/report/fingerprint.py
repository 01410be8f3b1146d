"""Summaries of the `.fingerprint` files opbench saves beside each asv results file.

asv only records the environment name; the fingerprint says which BLAS, torch and numpy
actually ran, which is what explains a step between two environments or two dates.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

FINGERPRINT_COLUMNS = ("blas", "blas_threads", "torch_version", "numpy_version")
# `opbench run` in this environment runs asv through a Python at .asv/python/env-<digest>/python,
# so asv's environment name (the path, with / as _) carries the stack's label: one machine, one
# environment per stack (accuracy.run.environment_python)
ENV_LABEL = re.compile(r"_(env-[0-9a-f]{8})_python$")


PENDING_SUFFIX = ".pending"  # `opbench run` writes X.fingerprint.pending, then X.json, then renames
RESULTS_DIGEST = "results_sha256"  # in each fingerprint: the results file it belongs to


def results_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _belongs(path: Path, digest: str, legacy: bool) -> bool:
    """Whether the fingerprint at `path` was saved with the results whose digest is `digest`
    (fingerprints saved before the digest was recorded are trusted when `legacy`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return legacy  # unreadable: let the reader report it
    if not isinstance(data, dict) or RESULTS_DIGEST not in data:
        return legacy
    return data[RESULTS_DIGEST] == digest


def fingerprint_path(result_path: Path) -> Path:
    """The fingerprint that belongs to the results file as it is now.

    A save interrupted between the results rename and the fingerprint rename leaves the new
    results beside the old X.fingerprint and the new X.fingerprint.pending: the recorded digest
    of the results picks the right one, so a results file is never read with another run's stack.
    """
    committed = result_path.with_suffix(".fingerprint")
    pending = committed.with_name(committed.name + PENDING_SUFFIX)
    if not pending.exists():
        return committed
    try:
        digest = results_digest(result_path.read_bytes())
    except OSError:
        return committed
    if committed.exists() and _belongs(committed, digest, legacy=False):
        return committed
    return pending if _belongs(pending, digest, legacy=False) else committed


def read_fingerprint(result_path: Path, warnings: list[str]) -> dict[str, object]:
    """Summary columns for one results file; empty when it has no (readable, matching) fingerprint."""
    path = fingerprint_path(result_path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if RESULTS_DIGEST in data and data[RESULTS_DIGEST] != results_digest(result_path.read_bytes()):
            warnings.append(f"{path}: fingerprint of another save of {result_path.name} (an interrupted run) ignored")
            return {}
        return summarize_fingerprint(data)
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        warnings.append(f"{path}: unreadable fingerprint ignored ({type(exc).__name__}: {exc})")
        return {}


def summarize_fingerprint(data: dict) -> dict[str, object]:
    """e.g. {"blas": "openblas 0.3.31 Haswell", "blas_threads": "8", "torch_version": "2.13.0"}."""
    blas = data.get("blas") or []
    summary = {
        "blas": "; ".join(
            " ".join(str(entry[key]) for key in ("internal_api", "version", "architecture") if entry.get(key))
            for entry in blas
        ),
        "blas_threads": "; ".join(str(entry.get("num_threads")) for entry in blas),
        "torch_version": _version(data.get("torch")),
        "numpy_version": _version(data.get("numpy")),
    }
    return {key: value for key, value in summary.items() if value}


def fingerprint_digest(data: dict, knobs: dict[str, str]) -> str:
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


def environment_label(data: dict, knobs: dict[str, str]) -> str:
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


def _version(entry: object) -> str | None:
    """Fingerprints store either a bare version string or a dict with a "version" key."""
    if isinstance(entry, dict):
        entry = entry.get("version")
    return None if entry is None else str(entry)
