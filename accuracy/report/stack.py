"""What ran: the software stack a results file was measured on, flattened from its fingerprint.

A fingerprint (`opbench info --json --full`, saved beside each asv results file) is nested; comparing
two of them needs flat "what -> which" pairs, e.g. `blas numpy-openblas` -> `OpenBLAS 0.3.30
SkylakeX, 2 threads`. `stack_difference` lists the pairs that differ between BASE and NEW: the
packages, BLAS libraries and their kernels, thread counts and process-start knobs that explain a
change. Keys a fingerprint lacks are skipped, so older or partial fingerprints still compare.
"""

from __future__ import annotations

from pathlib import Path

from accuracy.core.errors import OpbenchError
from accuracy.core.fingerprints import load_fingerprint

MISSING = "-"


def _read_fingerprint(result_path: Path) -> dict | None:
    try:
        data = load_fingerprint(result_path)
    except OpbenchError:  # the report's loader has said so, as a warning
        return None
    return data if data is not None and "error" not in data else None


def read_stack(result_path: Path) -> dict[str, str] | None:
    """The flattened stack of one results file; None without a readable fingerprint."""
    data = _read_fingerprint(result_path)
    return None if data is None else flatten(data)


def read_load(result_path: Path) -> tuple[float, int] | None:
    """(the highest 1-minute load average seen while the run that wrote the file ran, the
    machine's CPU count), as `opbench run` records it; None for older fingerprints."""
    load = _mapping((_read_fingerprint(result_path) or {}).get("load"))
    if not isinstance(load.get("max_1min"), (int, float)) or not isinstance(load.get("cpus"), int):
        return None
    return float(load["max_1min"]), load["cpus"]


def flatten(fingerprint: dict) -> dict[str, str]:
    """ "what" -> "which" for every part of the stack the fingerprint names."""
    stack: dict[str, str] = {}
    if fingerprint.get("python"):
        stack["python"] = str(fingerprint["python"])
    for source in ("versions", "packages"):
        for name, version in _mapping(fingerprint.get(source)).items():
            stack[f"package {name}"] = str(version)
    for provider in _mapping(fingerprint.get("blas_providers")).get("loaded") or []:
        if isinstance(provider, dict) and provider.get("name"):
            stack[f"blas {provider['name']}"] = _library(provider, "vendor")
    for library in fingerprint.get("blas") or []:
        if isinstance(library, dict) and library.get("filepath"):
            stack[f"threadpool {Path(library['filepath']).name}"] = _library(library, "internal_api")
    numpy = _mapping(fingerprint.get("numpy"))
    if numpy.get("simd_enabled"):
        stack["numpy SIMD"] = " ".join(map(str, numpy["simd_enabled"]))
    torch = _mapping(fingerprint.get("torch"))
    for key in ("cpu_capability", "num_threads"):
        if torch.get(key) is not None:
            stack[f"torch {key.replace('_', ' ')}"] = str(torch[key])
    for knob, value in _mapping(fingerprint.get("env")).items():
        stack[f"knob {knob}"] = str(value)
    return stack


def stack_difference(base: dict[str, str] | None, new: dict[str, str] | None) -> list[tuple[str, str, str]]:
    """(what, BASE's, NEW's) for each part that differs, in name order."""
    base, new = base or {}, new or {}
    return [
        (key, base.get(key, MISSING), new.get(key, MISSING))
        for key in sorted(base.keys() | new.keys())
        if base.get(key) != new.get(key)
    ]


def _library(entry: dict, name_key: str) -> str:
    """e.g. "OpenBLAS 0.3.30 SkylakeX, pthreads, 2 threads"."""
    head = " ".join(str(entry[k]) for k in (name_key, "version", "architecture") if entry.get(k))
    tail = [str(entry["threading_layer"])] if entry.get("threading_layer") else []
    if entry.get("num_threads") is not None:
        tail.append(f"{entry['num_threads']} threads")
    return ", ".join([head, *tail]) if tail else head


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}
