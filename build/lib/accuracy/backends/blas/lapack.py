"""gesv and potrf through LAPACKE (row-major) or, failing that, the Fortran symbols.

Reference liblapack exports only Fortran ``dgesv_``; OpenBLAS and MKL export both.
LAPACKE is preferred because it needs no transposed copies.
"""

import ctypes
from typing import Any

import numpy as np

from .abi import SymbolABI
from .cblas import PRECISIONS, ROW_MAJOR, Kernel, as_operand

_LOWER = b"L"


def _check_info(op: str, info: int, singular: str) -> None:
    if info < 0:
        raise RuntimeError(f"{op}: argument {-info} rejected by LAPACK (binding bug)")
    if info > 0:
        raise np.linalg.LinAlgError(f"{op}: {singular} (info={info})")


def _gesv_operands(a, b, dtype):
    b = np.asarray(b)
    a, b2 = as_operand(a, dtype, 2), as_operand(b.reshape(b.shape[0], -1) if b.ndim == 1 else b, dtype, 2)
    n = a.shape[0]
    if a.shape != (n, n) or b2.shape[0] != n:
        raise ValueError(f"gesv needs a square a and matching b, got {a.shape} and {b.shape}")
    return a, b2, b.shape


def _lapacke_gesv(fn, dtype, int_type) -> Kernel:
    def gesv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, x, shape = _gesv_operands(a, b, dtype)
        a, x = a.copy(), x.copy()  # LAPACK overwrites a with its LU factors, b with x
        n, nrhs = x.shape
        ipiv = np.empty(n, int_type)
        info = fn(ROW_MAJOR, n, nrhs, a.ctypes.data, max(1, n), ipiv.ctypes.data, x.ctypes.data, max(1, nrhs))
        _check_info("gesv", info, "singular matrix")
        return x.reshape(shape)

    return gesv


def _lapacke_potrf(fn, dtype) -> Kernel:
    def potrf(a: np.ndarray) -> np.ndarray:
        factor = as_operand(a, dtype, 2).copy()
        n = factor.shape[0]
        info = fn(ROW_MAJOR, _LOWER, n, factor.ctypes.data, max(1, n))
        _check_info("potrf", info, "matrix not positive definite")
        return np.tril(factor)

    return potrf


def _fortran_gesv(fn, dtype, int_type) -> Kernel:
    def gesv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, x, shape = _gesv_operands(a, b, dtype)
        a, x = np.array(a, order="F"), np.array(x, order="F")  # always copies: LAPACK overwrites both
        n, nrhs = x.shape
        ipiv = np.empty(n, int_type)
        c_n, c_nrhs, c_ld, info = int_type(n), int_type(nrhs), int_type(max(1, n)), int_type(0)
        fn(
            ctypes.byref(c_n),
            ctypes.byref(c_nrhs),
            a.ctypes.data,
            ctypes.byref(c_ld),
            ipiv.ctypes.data,
            x.ctypes.data,
            ctypes.byref(c_ld),
            ctypes.byref(info),
        )
        _check_info("gesv", info.value, "singular matrix")
        return np.ascontiguousarray(x).reshape(shape)

    return gesv


def _fortran_potrf(fn, dtype, int_type) -> Kernel:
    def potrf(a: np.ndarray) -> np.ndarray:
        factor = np.array(as_operand(a, dtype, 2), order="F")
        n = factor.shape[0]
        c_n, c_ld, info = int_type(n), int_type(max(1, n)), int_type(0)
        # The trailing size_t is gfortran's hidden length of the CHARACTER argument.
        fn(ctypes.c_char_p(_LOWER), ctypes.byref(c_n), factor.ctypes.data, ctypes.byref(c_ld), ctypes.byref(info), 1)
        _check_info("potrf", info.value, "matrix not positive definite")
        return np.ascontiguousarray(np.tril(factor))

    return potrf


def bind_lapacke(lib: ctypes.CDLL, abi: SymbolABI) -> dict[tuple[str, np.dtype], Kernel]:
    """Kernels for the ``LAPACKE_?gesv`` / ``LAPACKE_?potrf`` symbols ``lib`` exports."""
    i, ptr = abi.int_type, ctypes.c_void_p
    kernels = {}
    for letter, (dtype, _) in PRECISIONS.items():
        gesv = getattr(lib, abi.c_name(f"LAPACKE_{letter}gesv"), None)
        if gesv is not None:
            gesv.restype, gesv.argtypes = i, [ctypes.c_int, i, i, ptr, i, ptr, ptr, i]
            kernels["gesv", dtype] = _lapacke_gesv(gesv, dtype, i)
        potrf = getattr(lib, abi.c_name(f"LAPACKE_{letter}potrf"), None)
        if potrf is not None:
            potrf.restype, potrf.argtypes = i, [ctypes.c_int, ctypes.c_char, i, ptr, i]
            kernels["potrf", dtype] = _lapacke_potrf(potrf, dtype)
    return kernels


def bind_fortran_lapack(lib: ctypes.CDLL, abi: SymbolABI) -> dict[tuple[str, np.dtype], Kernel]:
    """Kernels for the Fortran ``?gesv_`` / ``?potrf_`` symbols ``lib`` exports."""
    i: Any = ctypes.POINTER(abi.int_type)
    ptr = ctypes.c_void_p
    kernels = {}
    for letter, (dtype, _) in PRECISIONS.items():
        gesv = getattr(lib, abi.fortran_name(f"{letter}gesv"), None)
        if gesv is not None:
            gesv.restype, gesv.argtypes = None, [i, i, ptr, i, ptr, ptr, i, i]
            kernels["gesv", dtype] = _fortran_gesv(gesv, dtype, abi.int_type)
        potrf = getattr(lib, abi.fortran_name(f"{letter}potrf"), None)
        if potrf is not None:
            potrf.restype, potrf.argtypes = None, [ctypes.c_char_p, i, ptr, i, i, ctypes.c_size_t]
            kernels["potrf", dtype] = _fortran_potrf(potrf, dtype, abi.int_type)
    return kernels


def bind_lapack(lib: ctypes.CDLL, abi: SymbolABI) -> dict[tuple[str, np.dtype], Kernel]:
    """LAPACKE kernels where exported, Fortran ones for whatever LAPACKE lacks."""
    return bind_fortran_lapack(lib, abi) | bind_lapacke(lib, abi)
