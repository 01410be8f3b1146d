"""threadpoolctl controllers for every BLAS loaded by path, and the vendor facts threadpoolctl omits.

threadpoolctl recognises a library by its file name (libopenblas*, libscipy_openblas*, libmkl_rt*,
libblis*). Debian's alternatives (``blas/libblas.so.3``, ``atlas/libblas.so.3``) and a library
named in OPBENCH_BLAS can be called anything, so each such file gets a controller class of its own,
registered with ``threadpoolctl.register``: from then on ``threadpool_info``, ``threadpool_limits``
and every ``ThreadpoolController`` see it, and limit it, like any library threadpoolctl knows.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from threadpoolctl import (
    BLISController,
    FlexiBLASController,
    LibController,
    MKLController,
    OpenBLASController,
    ThreadpoolController,
    register,
    reset_cached_controller,
)

from accuracy.core.private_apis import blas_symbol

VENDOR_NAMES = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS", "atlas": "ATLAS"}
# Environment variables that steer kernel choice; recorded so a result can be explained.
KERNEL_ENV_VARS = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_VERBOSE",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "MKL_THREADING_LAYER",
    "BLIS_ARCH_TYPE",
)
# threadpoolctl's controllers, tried in this order on a library it could not name by itself.
_VENDOR_CONTROLLERS = (OpenBLASController, MKLController, BLISController, FlexiBLASController)


class _MKLVersion(ctypes.Structure):
    """MKLVersion from mkl_service.h; ``processor`` names the code path MKL dispatched to."""

    _fields_ = [
        ("major", ctypes.c_int),
        ("minor", ctypes.c_int),
        ("update", ctypes.c_int),
        ("patch", ctypes.c_int),
        ("status", ctypes.c_char_p),
        ("build", ctypes.c_char_p),
        ("processor", ctypes.c_char_p),
        ("platform", ctypes.c_char_p),
    ]


def _openblas_config(library: LibController) -> str | None:
    get_config = blas_symbol(library, "openblas_get_config")
    if get_config is None:
        return None
    get_config.restype, get_config.argtypes = ctypes.c_char_p, []
    return get_config().decode(errors="replace").strip()


def _mkl_code_path(library: LibController) -> str | None:
    get_version = getattr(library.dynlib, "MKL_Get_Version", None)
    if get_version is None:
        return None
    info = _MKLVersion()
    get_version.restype, get_version.argtypes = None, [ctypes.POINTER(_MKLVersion)]
    get_version(ctypes.byref(info))
    return info.processor.decode() if info.processor else None


def vendor_facts(library: LibController) -> dict[str, str | None]:
    """What threadpoolctl's own controllers leave out: OpenBLAS's build configuration (the only
    place an unsuffixed ILP64 build says so) and the code path MKL dispatched to."""
    if library.internal_api == "openblas":
        return {"config": _openblas_config(library)}
    if library.internal_api == "mkl":
        return {"architecture": _mkl_code_path(library)}
    return {}


def describe(library: LibController) -> dict[str, str | None]:
    """Vendor, version, kernel architecture, threading layer and (OpenBLAS) config of one library."""
    facts = {key: getattr(library, key, None) for key in ("version", "architecture", "threading_layer")}
    facts |= {key: value for key, value in vendor_facts(library).items() if value}
    return {"vendor": VENDOR_NAMES.get(library.internal_api, library.internal_api), "config": None, **facts}


def kernel_env() -> dict[str, str]:
    """The set kernel-steering environment variables, e.g. ``OPENBLAS_CORETYPE=Haswell``."""
    return {name: os.environ[name] for name in KERNEL_ENV_VARS if name in os.environ}


class SerialBLASController(LibController):
    """A BLAS with neither threads nor an API to ask about them (Debian's reference BLAS/LAPACK,
    its serial ATLAS): one thread, nothing to limit, no version to report."""

    user_api = "blas"
    internal_api = "unknown"
    filename_prefixes = ()

    def get_num_threads(self) -> int:
        return 1

    def set_num_threads(self, num_threads: int) -> None:
        """Nothing to limit: the library never starts a thread."""

    def get_version(self) -> None:
        return None


class _ThisFileOnly:
    """A controller class registered for one file. threadpoolctl matches prefixes against base
    names only and Debian's alternatives share theirs, so any other file is declined."""

    registered_path: str

    def _find_affixes(self):
        # The first thing LibController.__init__ does; threadpoolctl skips a controller whose
        # construction raises OSError and tries the next one.
        if self.filepath != self.registered_path:
            raise OSError(f"{self.filepath} is not {self.registered_path}")
        return super()._find_affixes()

    def set_additional_attributes(self):
        super().set_additional_attributes()
        vars(self).update(vendor_facts(self))


def _serial_vendor(path: str) -> str:
    """Debian's alternatives directories name the serial libraries."""
    lowered = path.lower()
    if "atlas" in lowered:
        return "atlas"
    return "reference" if any(part in lowered for part in ("/blas/", "/lapack/")) else "unknown"


def _controller_class(path: str, lib: ctypes.CDLL) -> type[LibController]:
    base = next(
        (vendor for vendor in _VENDOR_CONTROLLERS if any(hasattr(lib, symbol) for symbol in vendor.check_symbols)),
        SerialBLASController,
    )
    attributes = {"registered_path": path, "filename_prefixes": (Path(path).name.lower(),)}
    if base is SerialBLASController:
        attributes["internal_api"] = _serial_vendor(path)
    return type(f"{base.__name__}For{Path(path).name}", (_ThisFileOnly, base), attributes)


def controller_for(path: str, lib: ctypes.CDLL) -> ThreadpoolController:
    """threadpoolctl's view of the loaded library at ``path`` alone, registering a controller for
    it first if threadpoolctl has none; LookupError if threadpoolctl cannot list the file at all.
    The cached controller (accuracy.core.threads) is dropped: the file was loaded without an import,
    which is what threadpoolctl watches to read the loaded libraries again."""
    reset_cached_controller()
    real = os.path.realpath(path)
    found = ThreadpoolController().select(filepath=real)
    if not len(found):
        register(_controller_class(real, lib))
        found = ThreadpoolController().select(filepath=real)
    if not len(found):  # threadpoolctl lists only mapped files whose name contains ".so"
        raise LookupError("threadpoolctl does not list it (is .so in its file name?)")
    return found
