"""How a BLAS/LAPACK build spells its symbols and sizes its integers.

Builds differ: numpy's OpenBLAS exports ``scipy_cblas_dgemm64_`` (ILP64), scipy's
``scipy_cblas_dgemm`` (LP64), MKL and Debian plain ``cblas_dgemm``.  Calling with
the wrong integer width silently corrupts memory, so the width is decided here,
once, from what the library itself exports.
"""

import ctypes
from dataclasses import dataclass

# (prefix, suffix) pairs in probing order; unsuffixed first, so MKL, which exports
# both ``cblas_dgemm`` and ``cblas_dgemm_64``, is bound through its default LP64 API.
_AFFIXES = (("", ""), ("scipy_", ""), ("scipy_", "64_"), ("", "64_"), ("", "_64"))
_ILP64_SUFFIXES = ("64_", "_64")
# One symbol from each interface: a library exporting any of them is worth binding.
_PROBE_SYMBOLS = ("cblas_ddot", "cblas_sdot", "LAPACKE_dgesv")
_PROBE_FORTRAN = ("dgesv", "ddot")


@dataclass(frozen=True)
class SymbolABI:
    """Symbol affixes and integer width of one library."""

    prefix: str
    suffix: str
    ilp64: bool

    @property
    def integer_width(self) -> str:
        return "ILP64" if self.ilp64 else "LP64"

    @property
    def int_type(self) -> type:
        """ctypes type of BLAS/LAPACK integers (dimensions, strides, pivots, info)."""
        return ctypes.c_int64 if self.ilp64 else ctypes.c_int32

    def c_name(self, base: str) -> str:
        """Name of a C-interface symbol: ``cblas_dgemm`` -> ``scipy_cblas_dgemm64_``."""
        return f"{self.prefix}{base}{self.suffix}"

    def fortran_name(self, base: str) -> str:
        """Name of a Fortran symbol: ``dgesv`` -> ``scipy_dgesv_64_``."""
        return f"{self.prefix}{base}_{self.suffix}"


def detect_abi(lib: ctypes.CDLL) -> SymbolABI | None:
    """Return the first affix pair under which ``lib`` exports CBLAS/LAPACK, else None.

    The width follows the suffix; an ILP64 build without suffix is only recognisable
    from its vendor's own report (OpenBLAS's ``USE64BITINT``), see ``controllers``.
    """
    for prefix, suffix in _AFFIXES:
        probe = SymbolABI(prefix, suffix, ilp64=False)
        names = [probe.c_name(s) for s in _PROBE_SYMBOLS]
        names += [probe.fortran_name(s) for s in _PROBE_FORTRAN]
        if any(hasattr(lib, name) for name in names):
            return SymbolABI(prefix, suffix, ilp64=suffix in _ILP64_SUFFIXES)
    return None
