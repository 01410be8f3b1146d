"""Declarations shared by the framework implementations (TensorFlow, ONNX Runtime, LibTorch, JAX).

Each op record lists its framework impls next to torch's; this module keeps them one line each:
the dtypes each framework runs on the CPU, what it promises about precision on a GPU (data for
the reader: every backend here runs on the CPU, where all of them compute in the storage
dtype), and a helper for the unary functions all four have.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

from accuracy.backends.onnxruntime import single
from accuracy.catalog.registry import Impl
from accuracy.core.dtypes import ALL_DTYPES, SINGLE_DOUBLE

TF_DTYPES = SINGLE_DOUBLE
ORT_DTYPES = ("float32",)  # most ORT CPU kernels are float32 only
ORT_FLOAT64 = SINGLE_DOUBLE  # the kernels that also have a double version
JAX_DTYPES = SINGLE_DOUBLE
LIBTORCH_DTYPES = ALL_DTYPES

# The float32 matmul/conv precision each framework defaults to on an NVIDIA GPU (Ampere or newer).
GPU_FLOAT32_DEFAULT = {
    "tensorflow": "TF32 (tf.config.experimental.enable_tensor_float_32_execution is on by default)",
    "jax": "TF32/bf16 passes (jax_default_matmul_precision 'default' lets XLA pick the fastest)",
    "onnxruntime": "whatever the CUDA provider's use_tf32 option says (its default is not verified here)",
    "libtorch": "float32 for matmul (allow_tf32 off), TF32 for cuDNN convolutions (cudnn.allow_tf32 on)",
}


def gpu_note(framework: str) -> str:
    return f"on a GPU, float32 defaults to {GPU_FLOAT32_DEFAULT[framework]}"


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
