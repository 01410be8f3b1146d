"""A Dask worker holds its thread limits for its life (#21): entering and leaving threadpoolctl's
limits in every task cost more than a small chunk's work. And a cluster's chunks are large, yet
leave every worker several tasks."""

from __future__ import annotations

import threading

import torch
from hypothesis import given
from hypothesis import strategies as st
from threadpoolctl import threadpool_info

from accuracy.backends import get_backend
from accuracy.workflows.cluster import thread_limits
from accuracy.workflows.scan import CHUNK, CLUSTER_CHUNK, TASKS_PER_WORKER, cluster_chunk


class _Counted:
    """The real torch backend, counting how often its limits are entered."""

    name = "torch"

    def __init__(self):
        self.entered: list[int] = []

    def thread_limit(self, n: int):
        self.entered.append(n)
        return get_backend("torch").thread_limit(n)


def _in_a_thread(fn):
    """Run `fn` in a fresh thread (as a worker's executor thread), returning what it returns."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_a_worker_thread_enters_its_limits_once_and_keeps_them():
    before = torch.get_num_threads()
    backend = _Counted()

    def tasks():
        seen = []
        for n in (1, 1, 1, 2, 2):
            with thread_limits([backend, backend], n, for_life=True):
                pass
            seen.append((torch.get_num_threads(), {lib["num_threads"] for lib in threadpool_info()}))
        return seen

    try:
        seen = _in_a_thread(tasks)
        assert backend.entered == [1, 2]  # once per count asked for, not once per task
        assert seen == [(1, {1})] * 3 + [(2, {2})] * 2  # held after each task returned
    finally:
        torch.set_num_threads(before)


def test_here_the_limits_last_for_the_block_only():
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # not `make test`'s one a worker: the count the block must restore
    try:
        with thread_limits([get_backend("torch")], 1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@given(st.integers(1, 1 << 40), st.integers(1, 4096))
def test_a_cluster_chunk_is_large_but_leaves_each_worker_several_tasks(total, workers):
    size = cluster_chunk(total, workers)
    assert size & (size - 1) == 0 and CHUNK <= size <= CLUSTER_CHUNK
    assert size == CHUNK or total >= TASKS_PER_WORKER * workers * size
    assert size == CLUSTER_CHUNK or total < TASKS_PER_WORKER * workers * 2 * size


def test_a_float32_scan_on_a_few_workers_takes_2_to_the_21_inputs_a_task():
    assert cluster_chunk(1 << 32, 2) == 1 << 21 == 8 * CHUNK
    assert cluster_chunk(1 << 32, 1024) == 1 << 20  # 4096 tasks: still 4 per worker
