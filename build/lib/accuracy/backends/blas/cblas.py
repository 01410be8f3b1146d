"""gemm, gemv and dot through a library's CBLAS symbols, on row-major numpy arrays.

Each binder returns only the kernels whose symbols the library exports, keyed by
``(op, numpy dtype)``, so a provider without ``cblas_sgemv`` simply lacks that op.
"""

import ctypes
from collections.abc import Callable

import numpy as np

from .abi import SymbolABI

ROW_MAJOR, NO_TRANS = 101, 111  # CBLAS enum values, fixed by the CBLAS standard
PRECISIONS: dict[str, tuple[np.dtype, type]] = {
    "s": (np.dtype(np.float32), ctypes.c_float),
    "d": (np.dtype(np.float64), ctypes.c_double),
}

Kernel = Callable[..., np.ndarray]


def as_operand(x: np.ndarray, dtype: np.dtype, ndim: int) -> np.ndarray:
    """A C-contiguous array of exactly ``dtype``: kernels never cast behind the caller's back."""
    x = np.asarray(x)
    if x.dtype != dtype:
        raise TypeError(f"expected {dtype} operands, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"expected a {ndim}-D operand, got shape {x.shape}")
    return np.ascontiguousarray(x)


def _pointer(x: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(x.ctypes.data)


def _gemm(fn, dtype: np.dtype) -> Kernel:
    def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = as_operand(a, dtype, 2), as_operand(b, dtype, 2)
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise ValueError(f"gemm shapes {a.shape} and {b.shape} do not align")
        c = np.empty((m, n), dtype)
        fn(
            ROW_MAJOR,
            NO_TRANS,
            NO_TRANS,
            m,
            n,
            k,
            1.0,
            _pointer(a),
            max(1, k),
            _pointer(b),
            max(1, n),
            0.0,
            _pointer(c),
            max(1, n),
        )
        return c

    return gemm


def _gemv(fn, dtype: np.dtype) -> Kernel:
    def gemv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
        a, x = as_operand(a, dtype, 2), as_operand(x, dtype, 1)
        m, n = a.shape
        if x.shape[0] != n:
            raise ValueError(f"gemv shapes {a.shape} and {x.shape} do not align")
        y = np.empty(m, dtype)
        fn(ROW_MAJOR, NO_TRANS, m, n, 1.0, _pointer(a), max(1, n), _pointer(x), 1, 0.0, _pointer(y), 1)
        return y

    return gemv


def _dot(fn, dtype: np.dtype) -> Kernel:
    def dot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x, y = as_operand(x, dtype, 1), as_operand(y, dtype, 1)
        if x.shape != y.shape:
            raise ValueError(f"dot shapes {x.shape} and {y.shape} differ")
        return dtype.type(fn(x.shape[0], _pointer(x), 1, _pointer(y), 1))

    return dot


def bind_cblas(lib: ctypes.CDLL, abi: SymbolABI) -> dict[tuple[str, np.dtype], Kernel]:
    """Kernels for every CBLAS gemm/gemv/dot symbol ``lib`` exports under ``abi``."""
    i, ptr, enum = abi.int_type, ctypes.c_void_p, ctypes.c_int  # CBLAS enums stay C ints in ILP64
    kernels = {}
    for letter, (dtype, scalar) in PRECISIONS.items():
        signatures = {
            "gemm": (_gemm, None, [enum, enum, enum, i, i, i, scalar, ptr, i, ptr, i, scalar, ptr, i]),
            "gemv": (_gemv, None, [enum, enum, i, i, scalar, ptr, i, ptr, i, scalar, ptr, i]),
            "dot": (_dot, scalar, [i, ptr, i, ptr, i]),
        }
        for op, (wrap, restype, argtypes) in signatures.items():
            fn = getattr(lib, abi.c_name(f"cblas_{letter}{op}"), None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
                kernels[op, dtype] = wrap(fn, dtype)
    return kernels
