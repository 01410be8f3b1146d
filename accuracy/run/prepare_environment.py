"""`python -m accuracy.run.prepare_environment`, which `make setup` runs once per environment.

Every available backend loads its framework now, and LibTorch's backend is built (16 s here), so
that no command, test or benchmark process pays for either first. Run with bytecode writing on,
the imports leave the bytecode of exactly what opbench imports: compiling the whole environment
instead (`compileall`) took 37 s on both cores here, most of it for modules nothing imports.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from concurrent.futures import ThreadPoolExecutor

from accuracy.backends import catalog_backends
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
)


def main() -> int:
    """Exit 0 where LibTorch cannot be built here (no compiler, ninja or torch; another process's
    build held past the timeout): one line says why, and its implementations are then absent."""
    libtorch = LibTorchBackend()
    with ThreadPoolExecutor(1) as builder:
        build = None
        if libtorch.available():  # the compiler, a subprocess, runs beside the imports
            libtorch.torch  # noqa: B018 - torch is imported here, not by both threads at once
            build = builder.submit(libtorch.preload)
        for backend in catalog_backends():
            if backend.available() and not isinstance(backend, LibTorchBackend):
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
    if why:
        print(f"opbench: the LibTorch backend is not built: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
