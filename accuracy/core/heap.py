"""Handing freed memory back to the system between the large steps of one process.

glibc keeps what a program frees in its heap for reuse; after an ONNX export and its ONNX Runtime
sessions are dropped, 1.2 to 1.4 GB of BERT-base's stayed resident per port (measured), so every
later step started that much higher and the run's peak was the sum. `malloc_trim` returns it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018  # glibc only: musl and macOS have none
    except (OSError, TypeError, AttributeError):
        return None
    return libc


def release_freed_memory() -> None:
    """Return the heap's free pages to the system where the C library can (glibc); elsewhere nothing."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
