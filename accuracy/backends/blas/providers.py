"""BLAS/LAPACK providers: shared libraries loaded by path, described, and bound.

A provider is one ``.so``: numpy's or scipy's bundled OpenBLAS, MKL from the ``mkl``
wheel, a ``scipy-openblas32/64`` wheel, a Debian library, or a path given in
``OPBENCH_BLAS``.  Loading one never affects the others, and one that cannot be
loaded becomes a one-line ``ProviderLoadError`` rather than a crash.
"""

import ctypes
import glob
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import numpy as np
from threadpoolctl import ThreadpoolController

from accuracy.core.errors import OpbenchError
from accuracy.core.private_apis import torch_cpu_library

from .abi import SymbolABI, detect_abi
from .cblas import Kernel, bind_cblas
from .controllers import controller_for, describe, kernel_env
from .lapack import bind_lapack

ENV_VAR = "OPBENCH_BLAS"
OPS = ("gemm", "gemv", "dot", "gesv", "potrf")
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Debian's alternatives layout: one directory per implementation and threading flavour.
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
SYSTEM_PATTERNS = (
    "libopenblas*.so*",
    "openblas-*/libopenblas*.so*",
    "openblas-*/libblas.so.3",
    "libblis.so*",
    "blis-*/libblis*.so*",
    "blas/libblas.so.3",
    "lapack/liblapack.so.3",
    "atlas/libblas.so.3",
    "libmkl_rt.so*",
)


class ProviderLoadError(OpbenchError):
    """A provider that could not be used; ``str()`` is the one line to report."""

    def __init__(self, name: str, path: str, reason: str):
        self.name, self.path, self.reason = name, path, reason
        super().__init__(f"blas provider {name!r} ({path}): {reason}")


class MissingOpError(OpbenchError):
    """The provider's library does not export the symbol for this op and precision."""


@dataclass(frozen=True, eq=False)
class Provider:
    """A loaded BLAS/LAPACK library with its kernels (compared by identity).

    What it is and how many threads it uses come from threadpoolctl's controller for its file
    (``controllers``), which is also what limits its threads.
    """

    name: str
    path: str
    abi: SymbolABI
    controller: ThreadpoolController = field(repr=False)  # threadpoolctl, selected to this file
    facts: dict[str, str | None]  # describe(): vendor, version, architecture, threading_layer, config
    kernels: dict[tuple[str, np.dtype], Kernel] = field(repr=False)

    @property
    def vendor(self) -> str:
        return cast(str, self.facts["vendor"])  # describe() always names it (threadpoolctl's internal_api)

    @property
    def version(self) -> str | None:
        return self.facts["version"]

    @property
    def architecture(self) -> str | None:
        return self.facts["architecture"]

    @property
    def threading_layer(self) -> str | None:
        return self.facts["threading_layer"]

    @property
    def num_threads(self) -> int:
        return self.controller.lib_controllers[0].num_threads

    def threads(self, n: int):
        """Context manager: run the block with ``n`` threads, then restore the previous count."""
        return self.controller.limit(limits=n)

    def op(self, name: str, dtype) -> Kernel:
        """The kernel for ``name`` (gemm, gemv, dot, gesv, potrf) in ``dtype``."""
        kernel = self.kernels.get((name, np.dtype(dtype)))
        if kernel is None:
            raise MissingOpError(f"blas provider {self.name!r} has no {np.dtype(dtype)} {name}")
        return kernel

    def call(self, name: str, *operands: np.ndarray) -> np.ndarray:
        """Run op ``name`` in the precision of its first operand."""
        return self.op(name, np.asarray(operands[0]).dtype)(*operands)

    @property
    def missing_ops(self) -> list[str]:
        """``"<dtype> <op>"`` for each standard op this library does not export."""
        return [f"{d} {o}" for o in OPS for d in DTYPES if (o, d) not in self.kernels]

    def info(self) -> dict:
        """Everything a benchmark result needs to record about where it ran."""
        return {
            "name": self.name,
            "path": self.path,
            "vendor": self.vendor,
            "version": self.version,
            "architecture": self.architecture,
            "threading_layer": self.threading_layer,
            "num_threads": self.num_threads,
            "integer_width": self.abi.integer_width,
            "symbol_prefix": self.abi.prefix,
            "symbol_suffix": self.abi.suffix,
            "missing_ops": self.missing_ops,
            "kernel_env": kernel_env(),
        }


def default_name(path: str) -> str:
    """``/opt/x/libfoo.so.1`` -> ``user-libfoo``: names a library the user pointed to."""
    return f"user-{Path(path).name.split('.so')[0]}"


_bind_torch = True  # False in a process that only lists the providers (`runs_no_op`)


def runs_no_op() -> None:
    """This process lists the providers and never calls an op (asv's discovery of the suite):
    torch's kernels, which it never runs, need not be bound first (0.2 CPU-s per discovery)."""
    global _bind_torch
    _bind_torch = False


def _torch_bound_first() -> None:
    """Bind torch's kernels to torch's own libraries before any provider runs. MKL's runtime (pip's
    `libmkl_rt`) opens its layers into the process's global symbol scope on its first call, and a
    torch loaded after that binds its calls to them: its MKL kernels and OpenMP became MKL's and
    Intel's, and small_cnn's float32 output moved from 6.39e-8 to 7.38e-8 of float64 (issue 60: a
    test worker, or a user's process, that listed BLAS providers before using torch). torch's CPU
    library is loaded here with every symbol bound at once (ctypes loads with RTLD_NOW), without
    importing torch (0.2 s, where `import torch` takes 2)."""
    if "torch" in sys.modules or not _bind_torch:
        return
    library = torch_cpu_library()
    if library is not None:
        ctypes.CDLL(str(library))


def load_provider(path: str | os.PathLike, name: str | None = None) -> Provider:
    """Load the library at ``path``; raise ``ProviderLoadError`` if it is unusable."""
    path = os.fspath(path)
    name = name or default_name(path)
    _torch_bound_first()
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:  # missing file, wrong architecture, unresolved dependency
        raise ProviderLoadError(name, path, f"cannot load: {exc}") from None
    abi = detect_abi(lib)
    if abi is None:
        raise ProviderLoadError(name, path, "exports no CBLAS, LAPACKE or Fortran LAPACK symbols")
    try:
        controller = controller_for(path, lib)
        facts = describe(controller.lib_controllers[0])
    except (LookupError, AttributeError, ValueError, OSError) as exc:
        raise ProviderLoadError(name, path, f"cannot introspect: {exc}") from None
    if facts["config"] and "USE64BITINT" in facts["config"]:  # ILP64 without a symbol suffix
        abi = replace(abi, ilp64=True)
    kernels = bind_cblas(lib, abi) | bind_lapack(lib, abi)
    return Provider(name=name, path=path, abi=abi, controller=controller, facts=facts, kernels=kernels)


def _package_dir(package: str) -> Path | None:
    """Where ``package`` is installed, found without importing it."""
    spec = importlib.util.find_spec(package)
    return Path(spec.origin).parent if spec and spec.origin else None


def _bundled(package: str, name: str) -> list[tuple[str, str]]:
    """OpenBLAS vendored by auditwheel into ``<package>.libs``."""
    root = _package_dir(package)
    if root is None:
        return []
    return [(name, p) for p in sorted(glob.glob(str(root.parent / f"{package}.libs" / "libscipy_openblas*.so")))]


def _openblas_wheel(package: str) -> list[tuple[str, str]]:
    """A ``scipy-openblas32/64`` wheel, named by its package and not its version.

    asv labels parameters from the first environment it discovers, so the name must stay the
    same across environments that install different versions (the BLAS-upgrade matrix);
    the version is in the provider's report and the fingerprint.
    """
    if importlib.util.find_spec(package) is None:
        return []
    module = importlib.import_module(package)
    return [(package.replace("_", "-"), os.path.join(module.get_lib_dir(), module.get_library(fullname=True)))]


def _mkl_wheel() -> list[tuple[str, str]]:
    """``libmkl_rt`` installed by the PyPI ``mkl`` wheel into the environment's lib/."""
    return [("mkl", p) for p in sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))[:1]]


def _system_name(path: str) -> str:
    """``/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3`` -> ``system-openblas-pthread``."""
    parent = Path(path).parent.name
    if parent in ("blas", "lapack"):
        return f"system-reference-{parent}"
    if parent not in ("x86_64-linux-gnu", "lib64", "lib"):
        return f"system-{parent}"
    return "system-" + Path(path).name.split(".so")[0].removeprefix("lib")


def _system(lib_dirs: tuple[str, ...]) -> list[tuple[str, str]]:
    found = []
    for lib_dir in lib_dirs:
        for pattern in SYSTEM_PATTERNS:
            found += [(_system_name(p), p) for p in sorted(glob.glob(os.path.join(lib_dir, pattern)))]
    return found


def parse_env(value: str) -> list[tuple[str | None, str]]:
    """``/a/libx.so:name,/b/liby.so`` -> ``[("name", "/a/libx.so"), (None, "/b/liby.so")]``."""
    entries: list[tuple[str | None, str]] = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        path, sep, name = item.rpartition(":")
        entry = (name, path) if sep and "/" not in name else (None, item)
        if not entry[1]:  # ctypes would load the running program itself and call it a provider
            raise OpbenchError(f"{ENV_VAR} entry {item!r} names no library file; write /path/lib.so[:name]")
        entries.append(entry)
    return entries


def candidates(lib_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> list[tuple[str, str]]:
    """``(name, path)`` for every provider found on this machine, one per real file."""
    found = (
        _bundled("numpy", "numpy-openblas")
        + _bundled("scipy", "scipy-openblas")
        + _mkl_wheel()
        + _openblas_wheel("scipy_openblas32")
        + _openblas_wheel("scipy_openblas64")
        + _system(lib_dirs)
    )
    unique, seen = [], set()
    for name, path in found:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            unique.append((name, path))
    return unique


@dataclass
class Discovery:
    """Providers that loaded, by name, and one error per provider that did not."""

    providers: dict[str, Provider]
    load_errors: list[ProviderLoadError]


def _load_all(entries: list[tuple[str, str]]) -> Discovery:
    discovery = Discovery({}, [])
    for name, path in entries:
        if name in discovery.providers:  # e.g. two system dirs holding alike-named files
            name = f"{name}@{path}"
        try:
            discovery.providers[name] = load_provider(path, name)
        except ProviderLoadError as error:
            discovery.load_errors.append(error)
    return discovery


def requested_in_env(environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """``(name, path)`` for each library listed in ``OPBENCH_BLAS``."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return [(name or default_name(path), path) for name, path in parse_env(value)]


def discover_providers(environ: dict[str, str] | None = None, lib_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> Discovery:
    """Load every provider found here plus those listed in ``OPBENCH_BLAS``; skip, never raise."""
    return _load_all(candidates(lib_dirs) + requested_in_env(environ))
