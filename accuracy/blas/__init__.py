"""A ``blas`` backend: CBLAS/LAPACK shared libraries loaded by path through ctypes.

Lets one process run the same op on numpy's OpenBLAS, scipy's, MKL, an older
OpenBLAS wheel or a system library, and say which kernels each one used.
"""

from .compare import GemmComparison, compare_gemm
from .providers import (
    ENV_VAR,
    Discovery,
    MissingOpError,
    Provider,
    ProviderLoadError,
    discover_providers,
    load_provider,
    requested_in_env,
)
from .reproducibility import ThreadReproducibility, gemm_thread_reproducibility

__all__ = [
    "ENV_VAR", "Discovery", "GemmComparison", "MissingOpError", "Provider", "ProviderLoadError",
    "ThreadReproducibility", "compare_gemm", "discover_providers", "gemm_thread_reproducibility",
    "load_provider", "requested_in_env",
]
