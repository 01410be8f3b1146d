"""`python -m accuracy.run.prepare_environment`, which `make setup` runs once per environment.

Every available backend loads its framework now, and LibTorch's backend is built (16 s here), so
that no command, test or benchmark process pays for either first. Run with bytecode writing on,
the imports leave the bytecode of exactly what opbench imports: compiling the whole environment
instead (`compileall`) took 37 s on both cores here, most of it for modules nothing imports.
Imports run on one core, so the frameworks that do not import torch (TensorFlow, JAX, ONNX
Runtime) load in a second process, beside torch's in this one.
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from accuracy.backends import catalog_backends, get_backend
from accuracy.backends.libtorch import LibTorchBackend
from accuracy.core.errors import OpbenchError

# imported later than a backend's preload: by the commands (the report: matplotlib, pandas; asv),
# by torch.compile's first call (dynamo, inductor) and by --dask; an absent extra is skipped
LATER_IMPORTS = (
    "accuracy.cli.main",
    "accuracy.report.render",
    "asv.commands.run",
    "asv.commands.publish",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "distributed",
    # the deploy ports' runtimes (opbench model --port executorch/openvino)
    "executorch.exir",
    "executorch.backends.xnnpack.partition.xnnpack_partitioner",
    "executorch.runtime",
    "openvino",
)


def main(argv: Sequence[str] = ()) -> int:
    """Exit 0 where LibTorch cannot be built here (no compiler, ninja or torch; another process's
    build held past the timeout): one line says why, and its implementations are then absent.
    `--preload NAME...` (the second process) loads those backends only."""
    if argv and argv[0] == "--preload":
        for name in argv[1:]:
            get_backend(name).preload()
        return 0
    available = [b for b in catalog_backends() if b.available()]
    beside = [b.name for b in available if b.module != "torch"]
    second = subprocess.Popen([sys.executable, "-m", "accuracy.run.prepare_environment", "--preload", *beside])
    libtorch = LibTorchBackend()
    with ThreadPoolExecutor(1) as builder:
        build = None
        if libtorch.available():  # the compiler, a subprocess, runs beside the imports
            libtorch.torch  # noqa: B018 - torch is imported here, not by both threads at once
            build = builder.submit(libtorch.preload)
        for backend in available:
            if backend.module == "torch" and not isinstance(backend, LibTorchBackend):
                backend.preload()
        for module in LATER_IMPORTS:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        why = libtorch.missing()
        if build is not None:
            try:
                build.result()
            except OpbenchError as exc:
                why = str(exc)
    if second.wait() != 0:  # a framework that fails to load: its own traceback is on stderr
        return second.returncode
    if why:
        print(f"opbench: the LibTorch backend is not built: {why}", file=sys.stderr)
    _litert_environment()
    return 0


def _litert_environment() -> None:
    """`--port litert`'s environment built once, from the package index: its packages are then in
    uv's cache, where the port (and its test, offline) rebuild it. A failure is one line, not setup's."""
    from accuracy.workflows.model.ports.litert_port import litert_environment

    built = litert_environment(lambda line: None)
    if isinstance(built, str):
        print(f"opbench: the LiteRT port's environment is not built: {built}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
