"""A ``blas`` backend: CBLAS/LAPACK shared libraries loaded by path through ctypes.

Lets one process run the same op on numpy's OpenBLAS, scipy's, MKL, an older
OpenBLAS wheel or a system library, and say which kernels each one used.
"""

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
    "ENV_VAR",
    "Discovery",
    "MissingOpError",
    "Provider",
    "ProviderLoadError",
    "ThreadReproducibility",
    "discover_providers",
    "gemm_thread_reproducibility",
    "load_provider",
    "requested_in_env",
]
