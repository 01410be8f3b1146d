"""Summaries of the `.fingerprint` files opbench saves beside each asv results file.

asv only records the environment name; the fingerprint says which BLAS, torch and numpy
actually ran, which is what explains a step between two environments or two dates. The file
itself (where it is, the one reader that checks it, the stack label) is `accuracy.core.fingerprints`.
"""

from __future__ import annotations

from pathlib import Path

from accuracy.core.errors import OpbenchError
from accuracy.core.fingerprints import load_fingerprint

FINGERPRINT_COLUMNS = ("blas", "blas_threads", "torch_version", "numpy_version")


def read_fingerprint(result_path: Path, warnings: list[str]) -> dict[str, object]:
    """Summary columns for one results file; empty when it has no (readable, matching) fingerprint."""
    try:
        data = load_fingerprint(result_path)
        return {} if data is None else summarize_fingerprint(data)
    except OpbenchError as exc:
        warnings.append(f"{exc}; fingerprint ignored")
    except (ValueError, TypeError, AttributeError) as exc:  # a JSON object of another shape
        warnings.append(f"{result_path}: unreadable fingerprint ignored ({type(exc).__name__}: {exc})")
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


def _version(entry: object) -> str | None:
    """Fingerprints store either a bare version string or a dict with a "version" key."""
    if isinstance(entry, dict):
        entry = entry.get("version")
    return None if entry is None else str(entry)
