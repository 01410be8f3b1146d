"""The environment fingerprint: which BLAS, kernel, threads, CPU features and devices ran.

`opbench info` prints it and every asv results file gets a copy beside it, so a number can
always be traced to the library build and CPU dispatch that produced it.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any

from threadpoolctl import threadpool_info


def _numpy_info() -> dict:
    import numpy as np
    from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_features__  # type: ignore[import-not-found]

    return {
        "version": np.__version__,
        "simd_baseline": list(__cpu_baseline__),
        "simd_enabled": sorted(k for k, on in __cpu_features__.items() if on),
    }


# the environment variables a fingerprint records: the knobs that act at process start
RECORDED_ENV_PREFIXES = ("OPENBLAS_", "MKL_", "OMP_", "NPY_", "ATEN_", "TF_", "XLA_")


def first_core_cpuinfo() -> dict[str, str]:
    """The first core's fields of /proc/cpuinfo (model, flags, clock, ...); empty where there is none."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, sep, value = line.partition(":")
                if not sep and fields:
                    break  # the first core's block is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _cpu_info() -> dict:
    """Model and clock as Linux reports them: with the SIMD width (numpy's) they give the
    report's theoretical peak. `mhz` is the current clock of the first core, None elsewhere."""
    fields = first_core_cpuinfo()
    try:
        mhz = float(fields["cpu MHz"])
    except (KeyError, ValueError):
        mhz = None
    return {"model": fields.get("model name") or platform.processor() or None, "mhz": mhz}


def _torch_info() -> dict:
    try:
        import torch
    except ImportError:
        return {"available": False}
    return {
        "available": True,
        "version": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
        "num_threads": torch.get_num_threads(),
        "parallel_info": torch.__config__.parallel_info(),
        "build_config": torch.__config__.show(),
        "cuda_available": torch.cuda.is_available(),
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    }


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("opbench", "numpy", "scipy", "torch", "ml_dtypes", "mpmath", "threadpoolctl", "pandas", "asv"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# a metadata file's header lines end at the first blank line; a description follows
HEADER_END = re.compile(r"\r?\n\r?\n")
METADATA_FIELD = re.compile(r"^(Name|Version):[ \t]*(.*?)\r?$", re.M)


def installed_packages() -> dict[str, str]:
    """Every installed distribution: any of them can change a number (a plugin, a BLAS wheel).

    Each name and version is read from its metadata's header lines, which `Distribution.metadata`
    parses into a whole email message first: 0.01 s against 0.13 s for the 115 here, on every
    run's way to its first benchmark (the stack's key) and in its fingerprint."""
    from importlib.metadata import distributions

    pairs = []
    for dist in distributions():
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        header: dict[str, str] = {}
        for field, value in METADATA_FIELD.findall(HEADER_END.split(text, 1)[0]):
            header.setdefault(field, value)  # the first, as email's parser answers
        if header.get("Name"):
            pairs.append((header["Name"].lower(), header.get("Version", "")))
    return dict(sorted(pairs))


def _blas_providers() -> dict:
    """The CBLAS libraries the `blas` backend loads by path, and any that failed to load."""
    from accuracy.backends import blas_discovery

    discovery = blas_discovery()
    return {
        "loaded": [p.info() for p in discovery.providers.values()],
        "load_errors": [str(e) for e in discovery.load_errors],
    }


def _frameworks() -> dict:
    """Each framework backend's versions, math libraries and knobs; absent ones say so."""
    from accuracy.backends import framework_names, get_backend

    out: dict[str, dict[str, Any]] = {}
    for name in framework_names():
        backend = get_backend(name)
        if not backend.available():
            out[name] = {"available": False}
            continue
        try:
            out[name] = {"available": True, **backend.info()}
        except Exception as exc:  # a broken install is reported, not fatal to the fingerprint
            out[name] = {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    return out


def _versions_only(dist: str, module: str) -> dict:
    """What is known of a framework without importing it (seconds each): installed, and which version."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec(module) is None:
        return {"available": False}
    try:
        return {"available": True, "version": version(dist), "runtime": FULL_HINT}
    except PackageNotFoundError:
        return {"available": True, "version": None, "runtime": FULL_HINT}


FULL_HINT = "not imported: `opbench info --full` imports it for its runtime details"


def fingerprint(full: bool = True) -> dict:
    """Everything about this process's numerical stack that can change a number.

    `full=False` imports no framework (torch, TensorFlow, JAX, ONNX Runtime take seconds each):
    their versions come from the installed metadata, and their runtime details (torch's CPU
    capability, oneDNN, thread pools, devices) are left out. `opbench run` records the full one."""
    torch = _torch_info() if full else _versions_only("torch", "torch")  # first: threadpoolctl sees its OpenMP
    blas_providers = _blas_providers()  # loaded (and registered with threadpoolctl) before it lists
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": len(os.sched_getaffinity(0)),
        "cpu": _cpu_info(),
        "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith(RECORDED_ENV_PREFIXES)},
        "versions": _versions(),
        "packages": installed_packages(),
        "blas": [
            {
                k: lib.get(k)
                for k in (
                    "user_api",
                    "internal_api",
                    "version",
                    "architecture",
                    "threading_layer",
                    "num_threads",
                    "filepath",
                )
            }
            for lib in threadpool_info()
        ],
        "blas_providers": blas_providers,
        "numpy": _numpy_info(),
        "torch": torch,
        "frameworks": _frameworks() if full else _framework_versions(),
        "devices": ["cpu"] + [f"cuda:{i} {name}" for i, name in enumerate(torch.get("cuda_devices", []))],
    }


# the distribution whose version a framework reports, and its top module (a plugin's: its own name)
FRAMEWORK_PACKAGES = {
    "tensorflow": ("tensorflow-cpu", "tensorflow"),
    "onnxruntime": ("onnxruntime", "onnxruntime"),
    "libtorch": ("torch", "torch"),
    "jax": ("jax", "jax"),
}


def _framework_versions() -> dict:
    """Each framework's install and version, from its metadata: nothing is imported."""
    from accuracy.backends import framework_backends

    out: dict[str, dict[str, Any]] = {}
    for backend in framework_backends():
        if backend.framework not in out:
            dist, module = FRAMEWORK_PACKAGES.get(backend.framework, (backend.framework, backend.framework))
            out[backend.framework] = _versions_only(dist, module) if backend.available() else {"available": False}
    return out
