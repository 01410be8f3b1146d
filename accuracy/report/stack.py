"""What ran: the software stack a results file was measured on, flattened from its fingerprint.

A fingerprint (`opbench info --json --full`, saved beside each asv results file) is nested; comparing
two of them needs flat "what -> which" pairs, e.g. `blas numpy-openblas` -> `OpenBLAS 0.3.30
SkylakeX, 2 threads`. `stack_difference` lists the pairs that differ between BASE and NEW: the
packages, BLAS libraries and their kernels, thread counts and process-start knobs that explain a
change. Keys a fingerprint lacks are skipped, so older or partial fingerprints still compare.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
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


# The packages and BLAS libraries (the `blas <provider>` parts) each backend's implementations
# run on. A part of the stack that none of them names (another package, the threadpool view of a
# library whose package is already compared) leaves an implementation unchanged; the parts in
# `_EVERYONE` change every implementation; a backend this table does not know uses everything.
_BACKEND_LIBRARIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "numpy": (frozenset({"numpy"}), frozenset({"numpy-openblas"})),
    "scipy": (frozenset({"scipy", "numpy"}), frozenset({"scipy-openblas", "numpy-openblas"})),
    "torch": (frozenset({"torch"}), frozenset()),
    "jax": (frozenset({"jax", "jaxlib"}), frozenset()),
    "tensorflow": (frozenset({"tensorflow", "tensorflow-cpu", "keras", "tf-keras"}), frozenset()),
    "onnxruntime": (frozenset({"onnxruntime"}), frozenset()),
}
_BUNDLED_BLAS = {"numpy-openblas": "numpy", "scipy-openblas": "scipy"}  # the wheel that ships each
_EVERYONE = ("python", "knob ", "package opbench", "package asv")  # the interpreter, knobs, the harness


def normal_package(name: str) -> str:
    """PEP 503's normal form: `scipy_openblas32` and `scipy-openblas32` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _libraries(backend: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(packages, BLAS providers) a backend's implementations run on; None for an unknown backend."""
    if backend.startswith("blas-"):
        provider = backend.removeprefix("blas-")
        owner = _BUNDLED_BLAS.get(provider)
        return frozenset({normal_package(provider), *([owner] if owner else [])}), frozenset({provider})
    if backend.startswith("torch") or backend == "libtorch":  # torch-compile, torch-cuda: one wheel
        backend = "torch"
    return _BACKEND_LIBRARIES.get(backend)


def parts_used(backend: str, parts: Iterable[str]) -> list[str]:
    """The parts of the stack (keys of `flatten`) among `parts` that `backend`'s implementations
    run on: where none of a BASE -> NEW difference is, the implementation did not change and its
    timings measure the machine's drift between the two runs."""
    libraries = _libraries(backend)
    used = []
    for part in parts:
        kind, _, name = part.partition(" ")
        if part.startswith(_EVERYONE) or libraries is None:
            used.append(part)
        elif kind == "package":
            used += [part] if normal_package(name) in libraries[0] else []
        elif kind == "blas":
            used += [part] if name in libraries[1] else []
        elif kind in ("numpy", "torch"):  # numpy SIMD, torch cpu capability / num threads
            used += [part] if kind in libraries[0] else []
        elif kind != "threadpool":  # the threadpool view repeats what the package and blas parts say
            used.append(part)
    return used
