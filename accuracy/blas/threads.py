"""One way to read and temporarily change a provider's thread count.

threadpoolctl is used wherever it recognises the library (it knows each vendor's
quirks, e.g. OpenBLAS's single controlling thread); a library it does not recognise
(an unusual file name given by the user) falls back to the vendor's own API.
"""

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from threadpoolctl import ThreadpoolController


class ThreadControl(ABC):
    """Reads the current thread count and limits it for the length of a ``with`` block."""

    source: str  # where the control comes from, recorded with results

    @abstractmethod
    def get(self) -> int: ...

    @abstractmethod
    def limit(self, n: int) -> AbstractContextManager:
        """Use ``n`` threads inside the block, restore the previous count after it."""


class ThreadpoolctlThreads(ThreadControl):
    """Control through threadpoolctl, restricted to the one library selected by path."""

    source = "threadpoolctl"

    def __init__(self, selection: ThreadpoolController):
        self._selection = selection

    def get(self) -> int:
        return self._selection.lib_controllers[0].num_threads

    def limit(self, n: int) -> AbstractContextManager:
        return self._selection.limit(limits=n)


class NativeThreads(ThreadControl):
    """Control through the vendor's own get/set functions."""

    source = "native"

    def __init__(self, getter, setter, int_type=ctypes.c_int):
        getter.restype, getter.argtypes = int_type, []
        setter.restype, setter.argtypes = None, [int_type]
        self._get, self._set = getter, setter

    def get(self) -> int:
        return int(self._get())

    @contextmanager
    def limit(self, n: int) -> Iterator[None]:
        previous = self.get()
        self._set(n)
        try:
            yield
        finally:
            self._set(previous)


class SingleThread(ThreadControl):
    """A library with no runtime threading API (reference BLAS, Debian's serial ATLAS)."""

    source = "none"

    def get(self) -> int:
        return 1

    def limit(self, n: int) -> AbstractContextManager:
        return nullcontext()
