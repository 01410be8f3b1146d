"""Backends: how numpy arrays become a library's native arrays and back, and whether it is here.

The catalog of backends is plain data: each module named in BACKEND_MODULES, or named by an
installed package under the `opbench.backends` entry-point group, exports `BACKENDS`, a list of
`Backend` instances; adding a backend is one module. The BLAS libraries are discovered at run
time, one `blas-<provider>` backend each.
"""

from __future__ import annotations

import importlib
from functools import cache

from accuracy.backends.base import Backend
from accuracy.backends.blas.backend import blas_backends, blas_discovery
from accuracy.backends.pytorch import TORCH_VARIANTS
from accuracy.backends.startup_threads import StartupThreadsBackend
from accuracy.core.errors import OpbenchError
from accuracy.core.plugins import load_plugins

__all__ = [
    "BACKEND_MODULES",
    "TORCH_VARIANTS",
    "Backend",
    "backends_for",
    "blas_discovery",
    "catalog_backends",
    "framework_backends",
    "framework_names",
    "get_backend",
    "start_tensorflow",
]

BACKEND_MODULES = ("base", "pytorch", "tensorflow", "onnxruntime", "libtorch", "jax")
PLUGIN_GROUP = "opbench.backends"


@cache
def _catalog() -> dict[str, Backend]:
    backends = [
        b for module in BACKEND_MODULES for b in importlib.import_module(f"accuracy.backends.{module}").BACKENDS
    ]
    return {b.name: b for b in [*backends, *load_plugins(PLUGIN_GROUP, "BACKENDS", Backend)]}


def catalog_backends() -> list[Backend]:
    """Every backend of the catalog (a plugin's too), in order; the BLAS providers are found apart."""
    return list(_catalog().values())


def framework_backends() -> list[Backend]:
    """Every backend that runs an ML framework's own kernels (a plugin's too), in catalog order."""
    return [b for b in catalog_backends() if b.framework]


def framework_names() -> tuple[str, ...]:
    """The frameworks beside torch, each once (ONNX Runtime has two backends), from the backends'
    `framework` attribute: the one list the fingerprint, the asv profiles and the tests use."""
    return tuple(dict.fromkeys(b.framework for b in framework_backends()))


def backends_for(name: str) -> list[str]:
    """A declared backend's concrete instances: 'blas' is one per BLAS provider, 'torch' is
    the CPU and (where present) CUDA."""
    if name == "blas":
        return sorted(blas_backends())
    return ["torch", "torch-cuda"] if name == "torch" else [name]


def get_backend(name: str) -> Backend:
    catalog = _catalog()
    if name in catalog:
        return catalog[name]
    if name.startswith("blas-") and name in blas_backends():
        return blas_backends()[name]
    known = ", ".join([*catalog, *blas_backends()])
    raise OpbenchError(f"unknown backend {name!r}; choose from {known}")


def start_tensorflow() -> None:
    """Start TensorFlow's runtime with opbench's thread pools before other code (a Keras model
    being built) starts it with TF's defaults, which no later call could resize."""
    backend = get_backend("tensorflow")
    assert isinstance(backend, StartupThreadsBackend)
    backend.ensure_started()
