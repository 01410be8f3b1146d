"""accuracy.core.patching.replaced: a library's attribute replaced for a block, from many threads."""

from __future__ import annotations

import threading
import types

from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.core.patching import replaced


def original() -> str:
    return "original"


@settings(max_examples=20, deadline=None)
@given(threads=st.integers(2, 8), depth=st.integers(1, 3))
def test_blocks_in_many_threads_each_wrap_the_original_and_leave_it_in_place(threads, depth):
    """Each block sees the library's own function wrapped once (never another block's wrapper
    wrapped again), and after every block the attribute is the original."""
    library = types.SimpleNamespace(convert=original)
    seen: list[str] = []
    start = threading.Barrier(threads)

    def block(n: int) -> None:
        start.wait()
        for _ in range(depth):
            with replaced(library, "convert", lambda f, n=n: lambda: f"{f()} wrapped by {n}") as found:
                assert found is original
                seen.append(library.convert())

    workers = [threading.Thread(target=block, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert library.convert is original
    assert sorted(seen) == sorted(f"original wrapped by {n}" for n in range(threads) for _ in range(depth))


def test_the_original_is_back_when_the_block_raises():
    library = types.SimpleNamespace(convert=original)
    try:
        with replaced(library, "convert", lambda f: None):
            raise ValueError("the conversion failed")
    except ValueError:
        pass
    assert library.convert is original
