"""On-disk cache of exact references, keyed by a hash of the inputs and the op's version.

Exact references can take seconds (mpmath); the cache makes repeated runs cheap. Each entry
stores a digest of its key and its payload, so a corrupt or truncated entry, or a valid entry
copied or renamed onto another key (float64 exp's reference under float32 exp's key), is
detected and recomputed, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from accuracy.core.errors import OpbenchError, warn
from accuracy.core.files import cache_home, check_private_directory, check_regular, write_atomic
from accuracy.reference.exact import Exact

# 2: narrow elementwise references take their float64 value from torch (references.TORCH_TWINS)
# 3: the digest binds the entry to its key (format 2 entries simply miss)
# 4: references are stored as the arrays {hi, lo} of store_arrays, whose digest also binds dtypes
CACHE_FORMAT = 4


# Model conversions (ONNX exports, ExecuTorch programs) are kept in the reference cache unless
# this names a folder of their own: their keys hold the converter's code and versions, so the test
# suite keeps them across runs there while each run's references start empty (tests/conftest.py).
CONVERSIONS = "OPBENCH_CONVERSION_CACHE"


def _location(variable: str) -> tuple[Path, str]:
    """The folder `variable` names (else the reference cache's), and what it is called in a message."""
    if variable != "OPBENCH_CACHE" and os.environ.get(variable):
        return Path(os.environ[variable]), f"the conversion cache ({variable})"
    return Path(os.environ.get("OPBENCH_CACHE") or cache_home() / "opbench" / "refs"), "the reference cache"


def cache_dir(variable: str = "OPBENCH_CACHE") -> Path:
    """OPBENCH_CACHE (or `variable`, where set), else $XDG_CACHE_HOME/opbench/refs; refused if
    others could write to it (a forged entry there needs no secret: it would be read as the exact
    reference)."""
    path, what = _location(variable)
    check_private_directory(path, what)
    return path


_said_unusable: set[Path] = set()  # each unusable cache is said once per process


def usable_cache_dir(variable: str = "OPBENCH_CACHE") -> Path | None:
    """`cache_dir()`, or None where it cannot be used at all (a file where a directory of its path
    should be, no permission to look): the cache is optional, so the command runs without it and
    says so in one warning; `explain` refused (exit 2) with XDG_CACHE_HOME naming a file. A cache
    others could write to is still refused: its entries would be trusted."""
    path, what = _location(variable)
    try:
        is_dir = path.is_dir() or not path.exists()
        problem = None if is_dir else "a file, not a directory"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if problem is None:
        try:
            os.stat(path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # a file part-way up the path: Not a directory
            problem = exc.strerror or str(exc)
    if problem is not None:
        if path not in _said_unusable:
            _said_unusable.add(path)
            warn(f"{what} {path} cannot be used ({problem}); running without it (slower)")
        return None
    return cache_dir(variable)


def cache_key(op_name: str, op_version: int, fmt_name: str, inputs: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(f"{CACHE_FORMAT}:{op_name}:{op_version}:{fmt_name}".encode())
    for name in sorted(inputs):
        a = np.ascontiguousarray(inputs[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _stored_as_written(path: Path) -> bool:
    """Whether `path` is a regular file whose members are stored uncompressed, as np.savez writes
    them: a planted entry of compressed zeros (4 MB inflating to 4.26 GB) is never inflated."""
    size = check_regular(path, limit=sys.maxsize)
    with zipfile.ZipFile(path) as archive:
        return all(info.compress_type == zipfile.ZIP_STORED and info.file_size <= size for info in archive.infolist())


def _arrays_digest(key: str, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(key.encode() + b"\0")
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def load_arrays(key: str, variable: str = "OPBENCH_CACHE") -> dict[str, np.ndarray] | None:
    """The named arrays stored under `key` by `store_arrays`, or None: absent, unreadable, or not
    matching their digest (a tampered entry, or one copied from another key, is never trusted)."""
    folder = usable_cache_dir(variable)
    if folder is None:
        return None
    path = folder / f"{key}.npz"
    if not path.exists():
        return None
    try:
        if not _stored_as_written(path):
            return None
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, OpbenchError):
        return None
    digest = arrays.pop("digest", None)
    return arrays if digest is not None and str(digest) == _arrays_digest(key, arrays) else None


def store_arrays(key: str, arrays: dict[str, np.ndarray], variable: str = "OPBENCH_CACHE") -> None:
    """`arrays` (numbers and text, never objects: nothing stored is unpickled) kept under `key`;
    a read-only or full cache only costs time."""
    if "digest" in arrays or any(np.asarray(a).dtype.hasobject for a in arrays.values()):
        raise ValueError("the cache stores numeric and text arrays, with names other than 'digest'")
    folder = usable_cache_dir(variable)
    if folder is None:
        return
    path = folder / f"{key}.npz"
    digest = np.array(_arrays_digest(key, arrays))
    with contextlib.suppress(OSError, OpbenchError):
        path.parent.mkdir(parents=True, exist_ok=True)
        # not durable: an entry a crash tore fails its digest when read and is computed again, so
        # its two fsyncs bought nothing (a model run writes hundreds of entries: the cause self-test
        # 918, each 0.65 ms slower with them here, and far slower on a network home)
        write_atomic(path, lambda f: np.savez(f, allow_pickle=False, **arrays, digest=digest), durable=False)


def cached(key: str, compute: Callable[[], Exact]) -> Exact:
    """The cached Exact for `key`, or `compute()` stored for next time."""
    stored = load_arrays(key)
    if stored is not None and stored.keys() == {"hi", "lo"}:
        return Exact(stored["hi"], stored["lo"])
    exact = compute()
    store_arrays(key, {"hi": exact.hi, "lo": exact.lo})
    return exact
