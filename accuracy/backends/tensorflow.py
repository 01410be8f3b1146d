"""TensorFlow (tensorflow-cpu) in eager mode: TF's own kernels (Eigen, and oneDNN where enabled).

Two process-start knobs decide which kernels run: TF_ENABLE_ONEDNN_OPTS (read once, at import;
unset, TF turns oneDNN on only on CPUs it expects to gain from it: off on an AVX2 AMD EPYC, on
with AVX512-VNNI or AVX512-BF16; on with =1; asv.knobs.conf.json runs both settings) and the
intra/inter-op thread counts, which TF fixes when its runtime starts (see accuracy.backends.startup_threads).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from types import ModuleType

from accuracy.backends.startup_threads import StartupThreadsBackend
from accuracy.core.dtypes import SINGLE_DOUBLE
from accuracy.core.errors import OpbenchError, quiet_stderr

ONEDNN_VAR = "TF_ENABLE_ONEDNN_OPTS"
# TF's C++ log level, read once when TF is imported: 2 keeps its INFO and WARNING lines (the
# cpu_feature_guard notice) off the terminal. Set only around the import, so the environment (and
# the fingerprint, which records TF_* variables) is unchanged; a level already set is kept. Lines
# logged before absl is initialised ignore the level: on a CPU where TF turns oneDNN on
# (AVX512-VNNI, AVX512-BF16, AMX), the import prints absl's "log messages before InitializeLog"
# line and "oneDNN custom operations are on" whatever it is, so the import runs with stderr quiet
# unless the level is 0, which asks for every line. A level of 1 is no such request: `import jax`
# sets it (os.environ.setdefault) in every process that imported JAX, and in their children.
LOG_LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
# Importing TensorFlow imports Keras (eagerly, for its optimizers' registrations), and both import
# libraries for features opbench never calls: pandas and matplotlib.pyplot (Keras' DataFrame
# slicing and image gallery), JAX (TFLite's JAX conversion) and scikit-learn (Keras' scikit-learn
# wrappers, with scipy.stats). Those not loaded yet are hidden from that one import, as if not
# installed: it took 7.8-8.8 CPU-s here with them, 4.8-5.7 without the first three, and 3.0 instead
# of 4.3 without scikit-learn too. Only on the importing thread and only during the import: a later
# `import pandas` (the report) or opbench's JAX backend loads them as usual, and Keras goes on
# without those features.
NOT_IMPORTED_WITH_TENSORFLOW = ("pandas", "matplotlib", "jax", "sklearn")


class _HiddenDuringImport(importlib.abc.MetaPathFinder):
    """Makes `import NAME` (or a submodule) fail on one thread, as for a library not installed."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.thread = threading.get_ident()

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in self.names and threading.get_ident() == self.thread:
            raise ModuleNotFoundError(f"{fullname} is not imported with TensorFlow (opbench)", name=fullname)
        return None


@contextmanager
def _without_optional_imports() -> Iterator[None]:
    hidden = _HiddenDuringImport(tuple(n for n in NOT_IMPORTED_WITH_TENSORFLOW if n not in sys.modules))
    sys.meta_path.insert(0, hidden)
    try:
        yield
    finally:
        sys.meta_path.remove(hidden)


class TensorFlowBackend(StartupThreadsBackend):
    name = "tensorflow"
    module = "tensorflow"
    modules = ("tensorflow",)
    framework = "tensorflow"
    dtypes = SINGLE_DOUBLE
    gpu_float32 = "TF32 (tf.config.experimental.enable_tensor_float_32_execution is on by default)"

    @cached_property
    def namespace(self):
        """TensorFlow, imported without its C++ INFO/WARNING lines (they are not opbench's output)
        and without the optional libraries it would import for features opbench does not use."""
        level = os.environ.get(LOG_LEVEL_VAR)
        with _without_optional_imports():
            if level == "0":
                return importlib.import_module(self.module)
            os.environ.setdefault(LOG_LEVEL_VAR, "2")
            try:
                with quiet_stderr():
                    return importlib.import_module(self.module)
            finally:
                if level is None:
                    del os.environ[LOG_LEVEL_VAR]

    def start(self, threads: int) -> None:
        tf = self.namespace
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # TF's "cannot be modified after initialization"
            raise OpbenchError(
                f"TensorFlow's runtime was started in this process before opbench sized its thread pools,"
                f" so it cannot run at {threads} threads: build Keras models after"
                " accuracy.backends.start_tensorflow(), or in a fresh process"
            ) from None

    def to_tensor(self, array):
        return self.namespace.constant(array)

    def run(self, fn, tensors: dict):
        return fn(self.namespace, **tensors).numpy()

    def info(self) -> dict:
        """Version, math libraries and the knobs in effect, read without importing TensorFlow: the
        import takes 5 s here, most of the fingerprint every `opbench run` waits for. The build's
        facts are a static module of the package (what tf.sysconfig.get_build_info returns), and
        whether oneDNN is on is TF's own answer, from its small util extension (knob applied)."""
        package = _package_dir(self.module)
        build_file = package / "python" / "platform" / "build_info.py"
        build = _module_at(f"{self.module}.python.platform.build_info", build_file)
        (extension,) = (package / "python" / "util").glob("_pywrap_util_port*.so")
        with quiet_stderr():  # it loads TF's C++ libraries, whose logging ignores LOG_LEVEL_VAR this early
            util_port = _module_at(f"{self.module}.python.util._pywrap_util_port", extension)
            onednn_enabled = bool(util_port.IsMklEnabled())  # logs "oneDNN custom operations are on"
        return {
            "version": _version(_distribution(self.module)),
            "keras": _version("keras"),
            "math_libraries": "Eigen (bundled), oneDNN (bundled)",
            "onednn_enabled": onednn_enabled,
            "knobs": {
                ONEDNN_VAR: os.environ.get(ONEDNN_VAR, "unset (TF decides per CPU)"),
                "threads": "intra/inter-op fixed at runtime start; other counts in a worker process",
            },
            "build": dict(build.build_info),
        }


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)  # finds the package without running its __init__
    assert spec is not None and spec.submodule_search_locations, module  # available() found it
    return Path(spec.submodule_search_locations[0])


def _module_at(name: str, path: Path) -> ModuleType:
    """The module `name` of a package, loaded from its file without importing the package. Under
    its full name: an extension module files itself in sys.modules, where the package's own import
    later finds it (loaded twice under two names, TF's crashes the process)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _distribution(module: str) -> str:
    """The distribution installing `module` (tensorflow-cpu here, tensorflow elsewhere): one whose
    top_level.txt names it, beside the package. Only where none does, every distribution's file
    list (`packages_distributions`: 0.17 CPU-s of each fingerprint here, against 0.04)."""
    from importlib.metadata import distributions, packages_distributions

    for dist in distributions(path=[str(_package_dir(module).parent)]):
        if module in (dist.read_text("top_level.txt") or "").split():
            return dist.metadata["Name"]
    return packages_distributions().get(module, [module])[0]


def _version(dist: str):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# Implementations that need more than one call: the layouts TF users write (Keras Dense keeps its
# kernel as W.T, convolutions are channels-last); transposes move values, they never round them.


def dense(tf, x, W, b):
    """keras.layers.Dense's math: matmul(x, kernel) + bias, kernel = W.T."""
    return tf.nn.bias_add(tf.linalg.matmul(x, W, transpose_b=True), b)


def intra_op_threads(tf):
    """The intra-op pool size this process's runtime started with (a probe for tests and info)."""
    return tf.constant(tf.config.threading.get_intra_op_parallelism_threads())


def keras_gelu(tf, x):
    """keras.ops.gelu with its default arguments (approximate=True), on the TensorFlow backend."""
    import keras

    return keras.ops.gelu(x)


_LAYER_NORMS: dict = {}


def keras_layer_norm(tf, x, w, b, epsilon=None):
    """keras.layers.LayerNormalization over the last axis with weights w, b; `epsilon=None` keeps
    Keras's default (1e-3). One layer per (epsilon, shape, dtype), built once."""
    import keras

    key = (epsilon, tuple(x.shape), x.dtype.name)
    if key not in _LAYER_NORMS:
        options = {} if epsilon is None else {"epsilon": epsilon}
        layer = keras.layers.LayerNormalization(dtype=x.dtype.name, **options)
        layer.build(x.shape)
        _LAYER_NORMS[key] = layer
    layer = _LAYER_NORMS[key]
    layer.gamma.assign(w)
    layer.beta.assign(b)
    return layer(x)


def conv1d(tf, x, w, b):
    """(batch, cin, L) cross-correlation through tf.nn.conv1d's NWC layout and (k, cin, cout) filters."""
    y = tf.nn.conv1d(tf.transpose(x, (0, 2, 1)), tf.transpose(w, (2, 1, 0)), stride=1, padding="VALID")
    return tf.transpose(tf.nn.bias_add(y, b), (0, 2, 1))


def conv2d(tf, x, w, b):
    """(batch, cin, H, W) through tf.nn.conv2d's NHWC layout and HWIO filters."""
    y = tf.nn.conv2d(tf.transpose(x, (0, 2, 3, 1)), tf.transpose(w, (2, 3, 1, 0)), strides=1, padding="VALID")
    return tf.transpose(tf.nn.bias_add(y, b), (0, 3, 1, 2))


def fft(tf, x):
    z = tf.signal.fft(tf.complex(x, tf.zeros_like(x)))
    return tf.stack([tf.math.real(z), tf.math.imag(z)], axis=-1)


def rfft(tf, x):
    z = tf.signal.rfft(x)
    return tf.stack([tf.math.real(z), tf.math.imag(z)], axis=-1)


BACKENDS = [TensorFlowBackend()]
