"""What a loaded library says about itself: vendor, version, kernel architecture, threading.

threadpoolctl's report is used where it recognises the library; the vendor's own
API fills in what it leaves out (MKL's code path) or replaces it entirely for
libraries it does not recognise.  Nothing is guessed from the CPU: the kernel
architecture is whatever the library reports choosing.
"""

import ctypes
import os
import re
from dataclasses import dataclass, field, replace

from threadpoolctl import ThreadpoolController

from .abi import SymbolABI
from .threads import NativeThreads, SingleThread, ThreadControl, ThreadpoolctlThreads

_VENDORS = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS"}
# Environment variables that steer kernel choice; recorded so a result can be explained.
KERNEL_ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_VERBOSE", "MKL_ENABLE_INSTRUCTIONS",
                   "MKL_CBWR", "MKL_THREADING_LAYER", "BLIS_ARCH_TYPE")


@dataclass(frozen=True)
class LibraryReport:
    vendor: str
    version: str | None = None
    architecture: str | None = None
    threading_layer: str | None = None
    config: str | None = None
    threads: ThreadControl = field(default_factory=SingleThread)


def _string(fn) -> str | None:
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    value = fn()
    return value.decode(errors="replace").strip() if value else None


def _openblas(lib: ctypes.CDLL, abi: SymbolABI) -> LibraryReport | None:
    def sym(name):
        return getattr(lib, abi.c_name(name), None)

    config = _string(sym("openblas_get_config"))
    if config is None:
        return None
    version = re.search(r"OpenBLAS (\S+)", config)
    parallel = sym("openblas_get_parallel")
    layer = None
    if parallel is not None:
        parallel.restype, parallel.argtypes = ctypes.c_int, []
        layer = {0: "disabled", 1: "pthreads", 2: "openmp"}.get(parallel())
    get, set_ = sym("openblas_get_num_threads"), sym("openblas_set_num_threads")
    return LibraryReport(
        vendor="OpenBLAS",
        version=version.group(1) if version else None,
        architecture=_string(sym("openblas_get_corename")),
        threading_layer=layer,
        config=config,
        threads=NativeThreads(get, set_) if get and set_ else SingleThread(),
    )


class _MKLVersion(ctypes.Structure):
    """MKLVersion from mkl_service.h; ``Processor`` names the code path MKL dispatched to."""

    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("update", ctypes.c_int),
                ("patch", ctypes.c_int), ("status", ctypes.c_char_p), ("build", ctypes.c_char_p),
                ("processor", ctypes.c_char_p), ("platform", ctypes.c_char_p)]


def _mkl(lib: ctypes.CDLL) -> LibraryReport | None:
    get_version = getattr(lib, "MKL_Get_Version", None)
    if get_version is None:
        return None
    info = _MKLVersion()
    get_version.restype, get_version.argtypes = None, [ctypes.POINTER(_MKLVersion)]
    get_version(ctypes.byref(info))
    set_layer = getattr(lib, "MKL_Set_Threading_Layer", None)
    layer = None
    if set_layer is not None:  # an invalid layer (-1) changes nothing and returns the current one
        set_layer.restype, set_layer.argtypes = ctypes.c_int, [ctypes.c_int]
        layer = {0: "intel", 1: "sequential", 2: "pgi", 3: "gnu", 4: "tbb"}.get(set_layer(-1))
    return LibraryReport(
        vendor="MKL",
        version=f"{info.major}.{info.minor}.{info.update}",
        architecture=info.processor.decode() if info.processor else None,
        threading_layer=layer,
        threads=NativeThreads(lib.MKL_Get_Max_Threads, lib.MKL_Set_Num_Threads),
    )


def _blis(lib: ctypes.CDLL) -> LibraryReport | None:
    version = _string(getattr(lib, "bli_info_get_version_str", None))
    if version is None:
        return None
    query, name = lib.bli_arch_query_id, lib.bli_arch_string
    query.restype, query.argtypes = ctypes.c_int, []
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.c_int]
    return LibraryReport(
        vendor="BLIS",
        version=version,
        architecture=name(query()).decode(),
        threads=NativeThreads(lib.bli_thread_get_num_threads, lib.bli_thread_set_num_threads, ctypes.c_int64),
    )


def _by_path(path: str) -> LibraryReport:
    """Libraries with no introspection API, named by Debian's directory layout."""
    lowered = path.lower()
    for marker, vendor in (("atlas", "ATLAS"), ("/blas/", "reference"), ("/lapack/", "reference")):
        if marker in lowered:
            return LibraryReport(vendor=vendor)
    return LibraryReport(vendor="unknown")


def _threadpoolctl_view(path: str) -> ThreadpoolController | None:
    selection = ThreadpoolController().select(filepath=os.path.realpath(path))
    return selection if len(selection) == 1 else None


def describe(lib: ctypes.CDLL, path: str, abi: SymbolABI) -> LibraryReport:
    """Report on ``lib`` (already loaded from ``path``), preferring threadpoolctl's view."""
    report = _openblas(lib, abi) or _mkl(lib) or _blis(lib) or _by_path(path)
    selection = _threadpoolctl_view(path)
    if selection is None:
        return report
    seen = selection.lib_controllers[0]
    return replace(
        report,
        vendor=_VENDORS.get(seen.internal_api, report.vendor),
        version=seen.version or report.version,
        architecture=getattr(seen, "architecture", None) or report.architecture,
        threading_layer=getattr(seen, "threading_layer", None) or report.threading_layer,
        threads=ThreadpoolctlThreads(selection),
    )


def kernel_env() -> dict[str, str]:
    """The set kernel-steering environment variables, e.g. ``OPENBLAS_CORETYPE=Haswell``."""
    return {name: os.environ[name] for name in KERNEL_ENV_VARS if name in os.environ}
