"""release_freed_memory hands freed heap pages back: after many small buffers are freed, glibc
keeps them resident (an ONNX export's protobufs, ONNX Runtime's arenas: 1.2-1.4 GB per BERT-base
port), and `opbench model` trims between ports."""

from __future__ import annotations

import sys

import pytest

from accuracy.core.heap import _libc, release_freed_memory


def _resident_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6


@pytest.mark.skipif(not sys.platform.startswith("linux") or _libc() is None, reason="glibc's malloc_trim only")
def test_freed_small_buffers_leave_the_process_after_a_trim():
    # a test worker's heap may hold freed pages still resident (what tests before left), which
    # the buffers would reuse without growing the process: trimmed first, they take fresh pages
    release_freed_memory()
    before = _resident_mb()
    buffers = [bytearray(1000) for _ in range(300_000)]  # 300 MB in heap chunks, not mmapped
    held = _resident_mb()
    del buffers
    kept = _resident_mb()
    release_freed_memory()
    trimmed = _resident_mb()
    assert held - before > 250
    assert kept - before > 150  # freed, but still resident in the heap
    assert trimmed - before < 50
