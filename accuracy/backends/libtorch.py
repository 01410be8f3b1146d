"""LibTorch, PyTorch's C++ library, called through its C++ API (libtorch.cpp), and TorchScript
run from C++ as a LibTorch application runs it (libtorch_script.cpp: torch::jit::load, forward).

The C++ functions are compiled once per torch build against the installed torch with
torch.utils.cpp_extension and cached on disk (TORCH_EXTENSIONS_DIR, ~/.cache/torch_extensions by
default). They are registered as torch.ops.opbench_libtorch.* and run in the same libtorch_cpu
the Python front end uses, so threads are torch's own (set in-process) and the question "does
LibTorch give PyTorch's bits?" is measured, not assumed.

One build per torch build, Python ABI and sources (`build_name`), shared by every environment
that has them (the project's .venv, a second clone's, asv's history virtualenvs): a finished
build is loaded directly, never through cpp_extension.load, whose ninja file names one
environment's torch headers and so rebuilt (16-54 s, silently) whenever another environment had
used the directory last; a fresh clone compiled it again too. cpp_extension's own lock (a `lock`
file, FileBaton) is left behind by a killed build and then waited on forever, so the build runs
under an flock of ours (released by the kernel when its holder dies): whoever holds it knows any
`lock` file is stale and removes it; whoever waits gives up after BUILD_TIMEOUT_VAR seconds with
one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path

from accuracy.backends.base import Backend
from accuracy.backends.pytorch import TorchBackend
from accuracy.core.errors import OpbenchError
from accuracy.core.files import cache_home, check_private_directory

# The ops, and TorchScript from C++ in a second source: ninja compiles them side by side (24 s and
# 19 s alone; 40 s together on the shared 2-core machine, load 2-3), and the ops' source stays free
# of the JIT's headers.
SOURCES = [Path(__file__).with_name("libtorch.cpp"), Path(__file__).with_name("libtorch_script.cpp")]
LIBRARY = "opbench_libtorch"  # the TORCH_LIBRARY namespace in libtorch.cpp: torch.ops.opbench_libtorch
BUILD_TIMEOUT_VAR = "OPBENCH_LIBTORCH_BUILD_TIMEOUT"
BUILD_TIMEOUT = 900.0  # seconds to wait for another process's build (one takes 16-54 s alone, minutes on a busy box)
BUILDING = "building the LibTorch backend (once per torch build)"
OWNER_FILE = "opbench.owner"  # flock'ed by the process building or loading; holds its pid
BUILD_ERRORS = "opbench-build-errors.log"  # the last failed compile's whole output


def build_name(torch_build: str, python_abi: str, source: bytes) -> str:
    """The extension's name and build directory: one per torch build (version, commit, C++ ABI),
    Python ABI and source, whichever environment has them; the library links torch's own
    libraries by name only (no path), so it loads in any environment with the same torch build."""
    digest = hashlib.sha256(b"\0".join([torch_build.encode(), python_abi.encode(), source])).hexdigest()
    return f"{LIBRARY}_{digest[:16]}"


@contextlib.contextmanager
def build_lock(build_dir: Path, timeout: float | None = None, built: bool = False) -> Iterator[None]:
    """Hold the build directory: waits up to `timeout` seconds for another process (saying for
    whom, unless the build is there already and the holder only loads it, a moment), and removes
    a `lock` file a killed build left behind (its owner is gone: we hold the flock every builder
    takes first), so cpp_extension never waits on it forever."""
    if timeout is None:
        timeout = float(os.environ.get(BUILD_TIMEOUT_VAR, BUILD_TIMEOUT))
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / OWNER_FILE, "a+") as owner:
        deadline, said = time.monotonic() + timeout, False
        while True:
            try:
                fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(owner)
                if time.monotonic() >= deadline:
                    raise OpbenchError(
                        f"the LibTorch backend is being built by another process (pid {holder}) in {build_dir}; "
                        f"waited {timeout:g} s (set {BUILD_TIMEOUT_VAR} to wait longer)"
                    ) from None
                if not said and not built:
                    print(f"opbench: waiting for pid {holder}, {BUILDING} in {build_dir}", file=sys.stderr)
                    said = True
                time.sleep(min(0.2, max(timeout, 0.0)))
        try:
            owner.seek(0)
            owner.truncate()
            owner.write(str(os.getpid()))
            owner.flush()
            with contextlib.suppress(FileNotFoundError):
                (build_dir / "lock").unlink()  # cpp_extension's FileBaton: stale, since we hold the flock
            yield
        finally:
            owner.truncate(0)
            fcntl.flock(owner, fcntl.LOCK_UN)


def _holder(owner) -> str:
    owner.seek(0)
    return owner.read().strip() or "unknown"


def build(
    name: str,
    build_dir: Path,
    compile_library: Callable[[], object],
    load: Callable[[Path], object],
    timeout: float | None = None,
) -> None:
    """Under the build lock, `load` the finished library, or compile it (`compile_library`:
    cpp_extension.load, which loads it too), saying so on stderr. A compile that fails or a
    library that does not load is one line (OpbenchError); the compiler's whole output, which
    cpp_extension puts in its exception, goes to BUILD_ERRORS in the build directory."""
    library = build_dir / f"{name}.so"
    with build_lock(build_dir, timeout, built=library.exists()):
        if library.exists():  # again: another process may have built it while this one waited
            try:
                load(library)
            except (OSError, RuntimeError) as exc:
                raise OpbenchError(
                    f"the LibTorch build {library} does not load ({_first_error(str(exc))}); delete it to rebuild"
                ) from None
            return
        print(f"opbench: {BUILDING} in {build_dir}", file=sys.stderr)
        try:
            compile_library()
        except (OSError, RuntimeError) as exc:  # cpp_extension: RuntimeError("Error building extension ...")
            log = build_dir / BUILD_ERRORS
            log.write_text(f"{exc}\n")
            why = _first_error(str(exc))
            raise OpbenchError(
                f"the LibTorch backend does not compile here: {why} (the compiler's output: {log})"
            ) from None


def _first_error(output: str) -> str:
    """The first `error:` line (the compiler's names the file and what is wrong), else the first line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if "error:" in line), lines[0] if lines else "no output")


class LibTorchBackend(Backend):
    """Tensors cross over exactly as for torch on the CPU; only the functions called differ."""

    name = "libtorch"
    module = "torch"
    framework = "libtorch"
    gpu_float32 = "float32 for matmul (allow_tf32 off), TF32 for cuDNN convolutions (cudnn.allow_tf32 on)"
    tensors = TorchBackend("cpu")

    def available(self) -> bool:
        """torch installed and a C++ compiler and ninja to build against it; checked without building."""
        return self.missing() is None

    def missing(self) -> str | None:
        """What keeps LibTorch from being built here ("no C++ compiler"), or None."""
        if importlib.util.find_spec("torch") is None:
            return "no torch"
        if shutil.which("c++") is None:
            return "no C++ compiler"
        if shutil.which("ninja") is None:
            return "no ninja"
        return None

    @cached_property
    def torch(self):
        import torch

        return torch

    @cached_property
    def build_name(self) -> str:
        torch = self.torch
        torch_build = f"{torch.__version__} {torch.version.git_version} cxx11abi={torch.compiled_with_cxx11_abi()}"
        sources = b"\0".join(s.read_bytes() for s in SOURCES)
        return build_name(torch_build, sysconfig.get_config_var("EXT_SUFFIX") or "", sources)

    @cached_property
    def build_directory(self) -> Path:
        """Under torch's extension root (TORCH_EXTENSIONS_DIR honoured), named per environment;
        refused where others could plant a library there (it is loaded, and its constructors run)."""
        from torch.utils import cpp_extension

        xdg = os.environ.get("XDG_CACHE_HOME")
        if xdg is not None and not os.path.isabs(xdg) and not os.environ.get("TORCH_EXTENSIONS_DIR"):
            os.environ["XDG_CACHE_HOME"] = str(cache_home())  # torch took an empty one for the current directory
        directory = Path(cpp_extension._get_build_directory(self.build_name, verbose=False))
        for folder in (directory.parent, directory):
            check_private_directory(folder, "the LibTorch extension directory")
        return directory

    @cached_property
    def namespace(self):
        from torch.utils import cpp_extension

        build(
            self.build_name,
            self.build_directory,
            compile_library=lambda: cpp_extension.load(
                name=self.build_name,
                sources=[str(s) for s in SOURCES],
                build_directory=str(self.build_directory),
                is_python_module=False,
                extra_cflags=["-O2", "-w"],
            ),
            load=lambda library: self.torch.ops.load_library(str(library)),
        )
        return getattr(self.torch.ops, LIBRARY)

    def preload(self) -> None:
        """Build once (or load the cached build): loading a library is safe before a fork."""
        _ = self.namespace

    def script(self, traced) -> CppScript:
        """`traced` (a torch.jit.ScriptModule) saved and loaded by torch::jit::load in C++."""
        return CppScript(self.namespace, traced)

    def to_native(self, array):
        _ = self.namespace  # build (or load the cached build) before the first tensor crosses over
        return self.tensors.to_native(array)

    def to_numpy(self, value, fmt):
        return self.tensors.to_numpy(value, fmt)

    def info(self) -> dict:
        """Where the build is cached and whether it exists; reading this never compiles."""
        return {
            "version": self.torch.__version__,
            "math_libraries": "the torch wheel's libtorch_cpu (see torch: MKL, oneDNN, OpenMP)",
            "build_directory": str(self.build_directory),
            "built": (self.build_directory / f"{self.build_name}.so").exists(),
            "cxx11_abi": bool(self.torch._C._GLIBCXX_USE_CXX11_ABI),
            "knobs": {"threads": "at::set_num_threads, the same pool as PyTorch's (set in-process)"},
        }


class CppScript:
    """A TorchScript module run from C++: saved with torch.jit.save to a temporary file, loaded
    there by torch::jit::load, and called with Module::forward on each call of this object. The
    C++ module is freed when this object is."""

    def __init__(self, namespace, traced) -> None:
        import torch

        self.namespace = namespace
        with tempfile.TemporaryDirectory(prefix="opbench-script-") as tmp:
            path = Path(tmp) / "module.pt"
            torch.jit.save(traced, str(path))
            self.handle: int = namespace.script_load(str(path))
        weakref.finalize(self, namespace.script_free, self.handle)

    def __call__(self, *inputs):
        return self.namespace.script_forward(self.handle, list(inputs))


BACKENDS = [LibTorchBackend()]
