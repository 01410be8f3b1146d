"""LibTorch, PyTorch's C++ library, called through its C++ API (libtorch.cpp).

The C++ functions are compiled once against the installed torch with torch.utils.cpp_extension
and cached on disk (TORCH_EXTENSIONS_DIR, ~/.cache/torch_extensions by default; rebuilt only
when the source or torch changes). They are registered as torch.ops.opbench_libtorch.* and run
in the same libtorch_cpu the Python front end uses, so threads are torch's own (set in-process)
and the question "does LibTorch give PyTorch's bits?" is measured, not assumed.
"""

from __future__ import annotations

import importlib.util
import shutil
from functools import cached_property
from pathlib import Path

from accuracy.backends.base import Backend
from accuracy.backends.pytorch import TorchBackend

SOURCE = Path(__file__).with_name("libtorch.cpp")
LIBRARY = "opbench_libtorch"


class LibTorchBackend(Backend):
    """Tensors cross over exactly as for torch on the CPU; only the functions called differ."""

    name = "libtorch"
    module = "torch"
    tensors = TorchBackend("cpu")

    def available(self) -> bool:
        """torch installed and a C++ compiler and ninja to build against it; checked without building."""
        return (
            importlib.util.find_spec("torch") is not None
            and shutil.which("c++") is not None
            and shutil.which("ninja") is not None
        )

    @cached_property
    def torch(self):
        import torch

        return torch

    @cached_property
    def namespace(self):
        from torch.utils import cpp_extension

        cpp_extension.load(name=LIBRARY, sources=[str(SOURCE)], is_python_module=False, extra_cflags=["-O2", "-w"])
        return getattr(self.torch.ops, LIBRARY)

    def preload(self) -> None:
        """Build once (or load the cached build): loading a library is safe before a fork."""
        self.namespace  # noqa: B018  the cached property builds or loads the library

    def to_native(self, array):
        self.namespace  # noqa: B018  build (or load the cached build) before the first tensor crosses over
        return self.tensors.to_native(array)

    def to_numpy(self, value, fmt):
        return self.tensors.to_numpy(value, fmt)

    def info(self) -> dict:
        """Where the build is cached and whether it exists; reading this never compiles."""
        from torch.utils import cpp_extension

        build = Path(cpp_extension._get_build_directory(LIBRARY, verbose=False))
        return {
            "version": self.torch.__version__,
            "math_libraries": "the torch wheel's libtorch_cpu (see torch: MKL, oneDNN, OpenMP)",
            "build_directory": str(build),
            "built": (build / f"{LIBRARY}.so").exists(),
            "cxx11_abi": bool(self.torch._C._GLIBCXX_USE_CXX11_ABI),
            "knobs": {"threads": "at::set_num_threads, the same pool as PyTorch's (set in-process)"},
        }


BACKENDS = [LibTorchBackend()]
