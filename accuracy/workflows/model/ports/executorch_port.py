"""ExecuTorch: `torch.export` -> `to_edge_transform_and_lower` (with the XNNPACK partitioner, or
none: the portable kernels) -> a .pte program, run by the ExecuTorch runtime's Python bindings.

End to end, the whole program runs with the ETDump event tracer and its debug buffer, and the
devtools' Inspector reads each operator's output back with the module it came from: every layer
shows with the portable kernels, while an XNNPACK delegate shows only its own outputs (the model's,
for a model lowered whole), so that port gives the model's output only.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from accuracy.core import patching
from accuracy.core.errors import quiet_stderr
from accuracy.core.patching import replaced
from accuracy.reference import cache as refcache
from accuracy.workflows.model.export_cache import cached_program
from accuracy.workflows.model.ports.base import EndToEnd
from accuracy.workflows.model.ports.deploy import WRAPPED, ConvertedPort, missing
from accuracy.workflows.model.trace import call_key
from accuracy.workflows.model.unit import Unit

# what importing and running the exporter logs that says nothing about the model: torchao's CUDA
# kernels missing from a CPU build, torch's deprecation of registering Enum constants
IMPORT_NOISE = ("torchao", "torch.utils._pytree")
# what an operator of a graph that XNNPACK's SDPA or bilinear-upsample patterns could match is
# named after: each of their patterns holds `_softmax` or `upsample_bilinear2d` (ExecuTorch 1.5.1)
PATTERN_OPS = ("softmax", "attention", "upsample")


@contextlib.contextmanager
def _quiet():
    """The exporter's import-time log lines and deprecation warnings kept off the user's terminal,
    and the runtime's C++ log lines (XNNPACK's cpuinfo probing the CPU: five lines as a program
    first loads here); a failure reaches Python as an exception with its message."""
    loggers = [logging.getLogger(name) for name in IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), quiet_stderr():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)  # the Inspector's notes on kwargs it does not record
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def patterns_possible(exported) -> bool:
    """Whether XNNPACK's SDPA or bilinear-upsample patterns could match the program: it names an
    operator of theirs (or one that lowers to one: an attention)."""
    return any(
        any(word in str(node.target) for word in PATTERN_OPS)
        for node in exported.graph.nodes
        if node.op == "call_function"
    )


@contextlib.contextmanager
def xnnpack_patterns_where_possible(exported):
    """XNNPACK's lowering matches SDPA and bilinear-upsample patterns that it builds by exporting
    and lowering six small models, about 6 CPU-s the first time in a process: left out for a
    program that holds none of their operators, where none can match."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    possible = patterns_possible(exported)

    def none_unless_possible(empty):
        return lambda built: built if possible else empty

    with (
        replaced(sdpa, "get_graphs", none_unless_possible(list)),
        replaced(bilinear_2d, "get_graphs_dict", none_unless_possible(dict)),
    ):
        yield


def cia_ops_materialized_once():
    """torch.export's decompositions materialize every C++ CompositeImplicitAutograd operator in
    torch.ops, once for each operator namespace on each of the several decompositions of a lowering
    (1,560 times for 8 lowerings here: a fifth of their CPU). Materializing is idempotent: here it
    runs again only where the dispatcher's registrations changed since it last ran."""
    import torch
    from torch._export import utils

    def where_changed(materialize):
        done: list = []

        def materialized() -> None:
            registered = torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")
            if done != [registered]:
                materialize()
                done[:] = [registered]

        return materialized

    return replaced(utils, "_materialize_cpp_cia_ops", where_changed)


def py_kernels_registered_plainly():
    """Each decomposition of a lowering overrides the Python kernels of torch's 513 preservable
    CompositeImplicitAutograd operators for its length, about 22 registrations each through
    `OperatorBase.py_impl`, whose inner decorator evaluates its typing annotations (`Callable[_P,
    _T]`) on every call: 30 of the override's 70 ms, 134 overrides in test_deploy_ports. A dispatch
    key's kernel is registered here as py_impl registers it (refused where one is, the dispatch
    cache cleared), without the annotations; any other key (a mode, a transform) goes to py_impl."""
    import torch
    from torch._C import DispatchKey

    def plainly(py_impl):
        def registering(self, key):
            if not isinstance(key, DispatchKey) or key == DispatchKey.Python:
                return py_impl(self, key)

            def register(fn):
                if key in self.py_kernels:
                    raise RuntimeError(f"Trying to override a python impl for {key} on operator {self.name()}")
                self.py_kernels[key] = fn
                self._dispatch_cache.clear()
                return fn

            return register

        return registering

    return replaced(torch._ops.OperatorBase, "py_impl", plainly)


def node_sources_shared():
    """torch.fx's provenance: each NodeSource made from a node deep-copies the node's chain of
    sources, which grows with every pass of a lowering (4 of test_quantized_ports' 63 profiled
    CPU-s). A NodeSource is not changed once made (passes make new ones, and new lists): here it
    holds a copy of the node's list, of the same sources; the node's own list, which later passes
    append to, stays apart from it."""
    import copy

    from torch.fx.traceback import NodeSource

    def sharing(init):
        def made(self, node, pass_name: str = "", action=None) -> None:
            init(self, None, pass_name, action)
            if node:
                self.node_info = self.NodeInfo(name=node.name, target=str(node.target), graph_id=id(node.graph))
                self.from_node = copy.copy(node.meta["from_node"]) if "from_node" in node.meta else []

        return made

    return replaced(NodeSource, "__init__", sharing)


@contextlib.contextmanager
def lighter_lowering():
    """A torch.export lowering's work for nothing left out (the same program): the CIA operators
    materialized once, their kernels registered plainly, the nodes' provenance shared. The last two
    copy torch's code: tests/core/test_private_apis.py fails where torch's differs."""
    with cia_ops_materialized_once(), py_kernels_registered_plainly(), node_sources_shared():
        yield


class ExecuTorchPort(ConvertedPort):
    converter = "torch.export + executorch.exir"
    runtime = "executorch"

    def __init__(self, name: str, model, inputs, delegate: bool):
        import executorch.version

        super().__init__(name, model, inputs)
        self.delegate = delegate
        kernels = "the XNNPACK delegate" if delegate else "the portable kernels (no delegate)"
        self.description = f"ExecuTorch {executorch.version.__version__} (.pte), {kernels}"

    def _lowered(self, module, example: tuple, etrecord: bool = False):
        import torch
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        # for an ETRecord, to the inference IR first: a vmap in the model (transformers builds its
        # attention masks with one) leaves torch.export's pre-dispatch calls in the graph, which the
        # ETRecord's serializer of torch 2.13 cannot write (pytorch#181263). Without one, to_edge's
        # own decompositions take the graph there: the same program bytes (small_cnn, small_mixed,
        # small_transformer, decoder, llama_tiny, both kernels, and int8), a fifth of the CPU less
        with lighter_lowering():
            exported = torch.export.export(module, example)
            if etrecord:
                exported = exported.run_decompositions({})
            partitioners = [XnnpackPartitioner()] if self.delegate else []
            with xnnpack_patterns_where_possible(exported):
                lowered = to_edge_transform_and_lower(exported, partitioner=partitioners, generate_etrecord=etrecord)
            return lowered.to_executorch()

    def convert(self, module, example: tuple):
        """`module` lowered for `example` (once per model state and inputs: export_cache), loaded."""
        with _quiet():
            from executorch.runtime import Runtime

            program = cached_program(
                lambda: self._lowered(module, example).buffer,
                f"delegate={self.delegate}",
                (sys.modules[__name__], patching),
                module,
                example,
            )
            return _Method(Runtime.get().load_program(program))

    def end_to_end(self, inputs, units) -> EndToEnd:
        """The whole program run once with ETDump on; each layer's output read back by the Inspector."""
        import torch

        model, tensors = self.whole(inputs)
        room = (1 << 20) + 8 * sum(4 * u.calls[-1].output.numel() for u in units)  # every op's output, with margin
        with _quiet(), torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
            from executorch.devtools import Inspector
            from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

            program = self._lowered(model, tensors, etrecord=True)
            files = {name: str(Path(tmp) / name) for name in ("etrecord.bin", "etdump.etdp", "debug.bin")}
            program.get_etrecord().save(files["etrecord.bin"])
            runtime = _load_for_executorch_from_buffer(program.buffer, enable_etdump=True, debug_buffer_size=room)
            output = runtime.forward(list(tensors))[0].numpy()
            runtime.write_etdump_result_to_file(files["etdump.etdp"], files["debug.bin"])
            inspector = Inspector(
                etdump_path=files["etdump.etdp"], etrecord=files["etrecord.bin"], debug_buffer_path=files["debug.bin"]
            )
            return EndToEnd(_layer_outputs(inspector, units), output)


def _layer_outputs(inspector, units: list[Unit]) -> dict[str, np.ndarray]:
    """Each layer's output by key: the last operator run for its module call (the innermost
    module of the operator's hierarchy; `@N` marks the module's call N + 1) whose output has the
    layer's shape. Operators inside a delegate are not there: the delegate call is left out."""
    shapes = {u.calls[0].key: tuple(u.calls[0].output.shape) for u in units}
    found = {}
    for block in inspector.event_blocks:
        for event in block.events:
            if (
                event.name == "DELEGATE_CALL"
                or event.is_delegated_op
                or not (event.debug_data and event.module_hierarchy)
            ):
                continue
            stack = list(event.module_hierarchy.values())[-1]  # {node: {frame: (path, class)}}: its last node's
            frame, (path, _) = list(stack.items())[-1]
            index = int(frame.rpartition("@")[2]) if "@" in frame else 0
            key = call_key(path.removeprefix(WRAPPED), index)
            value = event.debug_data[0]
            if key in shapes and tuple(value.shape) == shapes[key]:
                found[key] = value.numpy()
    return found


class _Method:
    """The program's forward method, holding the loaded program it runs in."""

    def __init__(self, loaded):
        self.loaded, self.method = loaded, loaded.load_method("forward")
        self.ran = False

    def __call__(self, arrays) -> list[np.ndarray]:
        import torch

        # its runtime takes contiguous inputs only; a leaf's recorded input may be a view (Whisper
        # feeds its layer norm the transposed convolution output)
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
        if self.ran:
            return [out.numpy() for out in self.method.execute(tensors)]
        # the portable kernels probe the CPU (cpuinfo) as a program first runs, not as it loads:
        # five log lines on stderr; a failure still reaches Python as an exception with its message
        with quiet_stderr():
            outputs = [out.numpy() for out in self.method.execute(tensors)]
        self.ran = True
        return outputs


def executorch_port(name: str, model, inputs, delegate: bool) -> ExecuTorchPort | str:
    absent = missing("executorch")
    if absent:
        return absent
    # a conversion cache others can write to is refused here, for the port, not as each unit's
    # failure to convert (one warning where it cannot be used at all: the port converts afresh)
    refcache.usable_cache_dir(refcache.CONVERSIONS)
    return ExecuTorchPort(name, model, inputs, delegate=delegate)
