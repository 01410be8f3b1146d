"""Declarations shared by the framework implementations (TensorFlow, ONNX Runtime, LibTorch, JAX).

Each op record lists its framework impls next to torch's; this module keeps them one line each.
The facts about each framework (the dtypes it runs on the CPU, what it promises about float32 on
a GPU) are its backend's attributes (accuracy.backends); the names below only read them, and a
helper spells the unary functions all four have.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

from accuracy.backends import get_backend
from accuracy.backends.onnxruntime import OnnxRuntimeBackend, single
from accuracy.catalog.registry import Impl

TF_DTYPES = get_backend("tensorflow").dtypes
ORT_DTYPES = get_backend("onnxruntime").dtypes
ORT_FLOAT64 = OnnxRuntimeBackend.float64_kernel_dtypes
JAX_DTYPES = get_backend("jax").dtypes
LIBTORCH_DTYPES = get_backend("libtorch").dtypes


def gpu_note(framework: str) -> str:
    return f"on a GPU, float32 defaults to {get_backend(framework).gpu_float32}"


def attribute(root, path: str):
    """`attribute(tf, "math.exp")` is tf.math.exp."""
    return reduce(getattr, path.split("."), root)


def unary(tf: str, onnx: str, libtorch: str, jax: str, onnx_dtypes=ORT_DTYPES, findings=None) -> list[Impl]:
    """An elementwise function as each framework spells it, e.g. unary("math.exp", "Exp", "exp", "numpy.exp");
    `findings` maps a backend to a measured defect of its kernel (Impl.finding)."""
    impls = [
        Impl("tensorflow", f"tf.{tf}", lambda ns, x: attribute(ns, tf)(x), TF_DTYPES),
        Impl("onnxruntime", onnx, single(onnx, ("x",)), onnx_dtypes),
        Impl("libtorch", f"torch::{libtorch}", lambda ns, x: getattr(ns, libtorch)(x), LIBTORCH_DTYPES),
        Impl("jax", f"jax.{jax}", lambda ns, x: attribute(ns, jax)(x), JAX_DTYPES),
    ]
    return [replace(i, finding=(findings or {}).get(i.backend, "")) for i in impls]
