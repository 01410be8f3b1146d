"""ExecuTorch: `torch.export` -> `to_edge_transform_and_lower` (with the XNNPACK partitioner, or
none: the portable kernels) -> a .pte program, run by the ExecuTorch runtime's Python bindings.

End to end, the port gives the model's output only: the bindings installed from the registry run
a .pte without the ETDump event tracer, and a delegated (XNNPACK) subgraph would show only its
own outputs in one anyway.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

from accuracy.workflows.model.ports.deploy import ConvertedPort, missing

# what importing and running the exporter logs that says nothing about the model: torchao's CUDA
# kernels missing from a CPU build, torch's deprecation of registering Enum constants
IMPORT_NOISE = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def _quiet():
    """The exporter's import-time log lines and deprecation warnings kept off the user's terminal."""
    loggers = [logging.getLogger(name) for name in IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class ExecuTorchPort(ConvertedPort):
    converter = "torch.export + executorch.exir"

    def __init__(self, name: str, model, inputs, delegate: bool):
        import executorch.version

        super().__init__(name, model, inputs)
        self.delegate = delegate
        kernels = "the XNNPACK delegate" if delegate else "the portable kernels (no delegate)"
        self.description = f"ExecuTorch {executorch.version.__version__} (.pte), {kernels}"

    def convert(self, module, example: tuple):
        import torch

        with _quiet():
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
            from executorch.exir import to_edge_transform_and_lower
            from executorch.runtime import Runtime

            exported = torch.export.export(module, example)
            partitioners = [XnnpackPartitioner()] if self.delegate else []
            program = to_edge_transform_and_lower(exported, partitioner=partitioners).to_executorch()
            return _Method(Runtime.get().load_program(program.buffer))


class _Method:
    """The program's forward method, holding the loaded program it runs in."""

    def __init__(self, loaded):
        self.loaded, self.method = loaded, loaded.load_method("forward")

    def __call__(self, arrays):
        import torch

        return self.method.execute([torch.from_numpy(a) for a in arrays])[0].numpy()


def executorch_port(name: str, model, inputs) -> ExecuTorchPort | str:
    absent = missing("executorch")
    if absent:
        return absent
    return ExecuTorchPort(name, model, inputs, delegate=name == "executorch")
