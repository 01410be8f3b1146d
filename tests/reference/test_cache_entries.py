"""Entries planted in the reference cache are never trusted, inflated or waited on (issue 40 item 16)."""

from __future__ import annotations

import os
import tracemalloc
import zipfile

import numpy as np

from accuracy.reference.cache import cache_dir, cached
from accuracy.reference.exact import Exact

KEY = "0" * 64
COMPUTED = Exact(np.ones(3), np.zeros(3))


def _compute_counted(calls: list[int]):
    def compute() -> Exact:
        calls.append(1)
        return COMPUTED

    return compute


def test_a_zip_bomb_entry_is_recomputed_without_inflating_it(cache_path):
    """A deflated member of 200 MB of zeros (200 KB on disk) was inflated by np.load."""
    cache_path.mkdir()
    archive = zipfile.ZipFile(cache_path / f"{KEY}.npz", "w", zipfile.ZIP_DEFLATED)
    with archive, archive.open("hi.npy", "w", force_zip64=True) as member:
        header = {"descr": "<f8", "fortran_order": False, "shape": (25_000_000,)}
        np.lib.format.write_array_header_1_0(member, header)
        for _ in range(200):
            member.write(bytes(1_000_000))
    assert os.path.getsize(cache_path / f"{KEY}.npz") < 1_000_000
    calls: list[int] = []
    tracemalloc.start()
    try:
        exact = cached(KEY, _compute_counted(calls))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert calls == [1] and exact is COMPUTED
    assert peak < 20_000_000, f"{peak / 1e6:.0f} MB allocated reading a planted entry"


def test_a_fifo_entry_never_blocks(cache_path):
    cache_path.mkdir()
    os.mkfifo(cache_path / f"{KEY}.npz")
    calls: list[int] = []
    assert cached(KEY, _compute_counted(calls)) is COMPUTED and calls == [1]
    assert (cache_dir() / f"{KEY}.npz").is_file()  # replaced by the real entry
    again: list[int] = []
    assert np.array_equal(cached(KEY, _compute_counted(again)).hi, COMPUTED.hi) and again == []


def test_an_entry_is_written_without_fsync_and_a_torn_one_is_computed_again(cache_path, monkeypatch, tmp_path):
    """An entry is checked by its digest when read, so the two fsyncs a result file gets (its own,
    its directory's) buy an entry nothing: it is written without them, and one a crash cut short is
    recomputed, never read. A result file still gets both."""
    from accuracy.core.files import write_atomic

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    calls: list[int] = []
    assert cached(KEY, _compute_counted(calls)) == COMPUTED and calls == [1] and synced == []
    write_atomic(tmp_path / "result.json", "{}")
    assert len(synced) == 2

    entry = cache_dir() / f"{KEY}.npz"
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])  # as a crash may leave it
    assert cached(KEY, _compute_counted(calls)) == COMPUTED and calls == [1, 1]
