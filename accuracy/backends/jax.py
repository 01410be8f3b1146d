"""JAX on XLA's CPU client: each implementation is jax.jit-compiled once, as JAX users run it.

Threads: XLA sizes its CPU thread pools from the CPUs the starting thread may run on, once, when
the client is created. The XLA_FLAGS often quoted for this (--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1) change nothing in jaxlib 0.10 (measured: the same CPU time per
matmul), so the client is created under a narrowed CPU affinity of the calling thread only,
restored right after; the pool keeps its size. float64 needs jax_enable_x64, set at start
(without it JAX silently computes float64 inputs in float32).

The CPU client even where a CUDA jaxlib is installed: JAX would otherwise take the GPU, with its
'default' matmul precision (TF32 or bfloat16 passes), for a backend judged as CPU float32. JAX
still initialises its CUDA plugin when the client starts; in a process forked after CUDA started
(explain's background zygote on a GPU machine) that fails with a logged traceback, JAX's noise
kept off the terminal as TensorFlow's is (seen on an H200 with jax 0.11.2, docs/gpu.md).
"""

from __future__ import annotations

import logging
import os
from functools import cached_property, partial
from pathlib import Path

from accuracy.backends.startup_threads import StartupThreadsBackend
from accuracy.core.dtypes import SINGLE_DOUBLE


class JaxBackend(StartupThreadsBackend):
    name = "jax"
    module = "jax"
    modules = ("jax", "jaxlib")
    framework = "jax"
    dtypes = SINGLE_DOUBLE
    gpu_float32 = "TF32/bf16 passes (jax_default_matmul_precision 'default' lets XLA pick the fastest)"

    def __init__(self):
        super().__init__()
        self._jitted: dict = {}

    @cached_property
    def namespace(self):
        import jax
        import jax.numpy
        import jax.scipy.special

        jax.config.update("jax_platforms", "cpu")
        return jax

    def start(self, threads: int) -> None:
        jax = self.namespace
        jax.config.update("jax_enable_x64", True)
        everywhere = os.sched_getaffinity(0)
        os.sched_setaffinity(0, sorted(everywhere)[:threads])
        plugins = logging.getLogger("jax._src.xla_bridge")  # where a failed plugin start is logged
        level = plugins.level
        plugins.setLevel(logging.CRITICAL)
        try:
            jax.numpy.zeros(1).block_until_ready()  # creates the client and its pools now
        finally:
            os.sched_setaffinity(0, everywhere)
            plugins.setLevel(level)

    def to_tensor(self, array):
        return self.namespace.device_put(array)

    def run(self, fn, tensors: dict):
        if fn not in self._jitted:
            self._jitted[fn] = self.namespace.jit(partial(fn, self.namespace))
        return self._jitted[fn](**tensors).block_until_ready()

    def info(self) -> dict:
        """Versions and knobs, from the installed distributions: importing JAX would add a second
        to every run's fingerprint, and creating its client would fix its threads."""
        from importlib.metadata import version

        return {
            "version": version("jax"),
            "jaxlib": version("jaxlib"),
            "math_libraries": "XLA CPU (bundled in jaxlib; Eigen and its own codegen)",
            "jax_enable_x64": "set at client start (float64 inputs stay float64)",
            "knobs": {"XLA_FLAGS": os.environ.get("XLA_FLAGS", "")},
            "threads": "XLA's pool is sized at client start; other counts in a worker process",
        }


def eigen_pool_threads(jax):
    """How many threads XLA's CPU client runs ops on (its pool threads are named tf_XLAEigen);
    read when traced, i.e. after the client started: a probe for tests and info."""
    names = [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task")]
    return jax.numpy.asarray(names.count("tf_XLAEigen"))


# Implementations that need more than one call; transposes and reshapes never round.


def conv(jax, x, w, b):
    """conv1d/conv2d: lax.conv_general_dilated's default layout is torch's (NCH[W], OIH[W])."""
    y = jax.lax.conv_general_dilated(x, w, (1,) * (x.ndim - 2), "VALID")
    return y + b.reshape((1, -1) + (1,) * (x.ndim - 2))


def dot_product_attention(jax, q, k, v):
    """jax.nn.dot_product_attention on (heads, n, d) inputs, as its (batch, n, heads, d) layout."""

    def bnhd(t):
        return t.transpose(1, 0, 2)[None]

    return jax.nn.dot_product_attention(bnhd(q), bnhd(k), bnhd(v))[0].transpose(1, 0, 2)


def fft(jax, x, real=False):
    z = jax.numpy.fft.rfft(x) if real else jax.numpy.fft.fft(x)
    return jax.numpy.stack([z.real, z.imag], axis=-1)


BACKENDS = [JaxBackend()]
