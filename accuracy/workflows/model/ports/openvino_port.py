"""OpenVINO: `openvino.convert_model` of the module, compiled for the CPU plugin.

`openvino` asks for f32 inference explicitly: the CPU plugin's default precision hint is bf16 on
CPUs that have it (measured: `Core().get_property("CPU", "INFERENCE_PRECISION_HINT")` is bf16 on
this machine's Xeon), which would judge a float32 port by bfloat16 arithmetic. `openvino-f16`
asks for f16 where the CPU computes it natively (else bf16), and is judged in that format.
"""

from __future__ import annotations

import contextlib

import numpy as np

from accuracy.backends import cpu_levels
from accuracy.core.dtypes import FORMATS
from accuracy.core.patching import replaced
from accuracy.workflows.model.ports.base import EndToEnd
from accuracy.workflows.model.ports.deploy import WRAPPED, ConvertedPort, missing, program_feed
from accuracy.workflows.model.unit import Unit

MODULE = "__module."  # the PyTorch frontend names a node made for module PATH "__module.PATH/aten::..."
HINTS = {"FP16": ("f16", "float16"), "BF16": ("bf16", "bfloat16")}  # CPU capability -> (hint, format judged)
NOT_NODES = {"Constant", "Parameter", "Result"}


@contextlib.contextmanager
def _no_telemetry():
    """`convert_model` with OpenVINO's usage telemetry off: unless opted out, each call sends
    about five events to Google Analytics, each from a process forked off this one (measured: 0.5
    CPU-s a conversion here, and a port converts every leaf), to report opbench's conversions,
    not the user's. The user's own choice holds for their conversions, before and after."""
    from openvino.tools.ovc import convert_impl

    held = []

    def without_consent(init):
        def init_without(*args, **kwargs):
            telemetry = init(*args, **kwargs)
            held.append((telemetry, getattr(telemetry, "consent", False)))
            telemetry.consent = False
            return telemetry

        return init_without

    try:
        with replaced(convert_impl, "init_ovc_telemetry", without_consent):
            yield
    finally:
        for telemetry, consent in held:
            telemetry.consent = consent


class OpenVinoPort(ConvertedPort):
    converter = "openvino.convert_model"
    runtime = "openvino"

    def __init__(self, name: str, model, inputs: dict[str, np.ndarray], hint: str, fmt: str):
        import openvino

        super().__init__(name, model, inputs)
        self.ov, self.core, self.hint, self.fmt = openvino, openvino.Core(), hint, FORMATS[fmt]
        version = openvino.__version__.partition("-")[0]
        self.description = f"OpenVINO {version} (openvino.convert_model) on CPU, inference precision {hint}"

    def _compile(self, ov_model):
        return self.core.compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": self.hint})

    def _ov_model(self, module, example: tuple):
        """The module as an OpenVINO model, with static shapes: those of its example inputs."""
        with _no_telemetry():
            ov_model = self.ov.convert_model(module, example_input=example)
        ov_model.reshape({i: list(t.shape) for i, t in enumerate(example)})
        return ov_model

    def convert(self, module, example: tuple):
        compiled = self._compile(self._ov_model(module, example))
        return lambda arrays: list(compiled(arrays).values())

    def end_to_end(self, inputs, units) -> EndToEnd:
        """The whole model's output, and each unit's output from a second compile of the model
        with the unit's node added as an output (outputs can stop a fusion, so the model's own
        output comes from the first)."""
        import torch

        model, tensors = self.whole(inputs)
        with torch.no_grad():
            ov_model = self._ov_model(model, tensors)
        arrays = program_feed(tensors)
        output = np.asarray(self._compile(ov_model)(arrays)[0])
        nodes = _layer_nodes(ov_model, units)
        outputs = {key: output for key, node in nodes.items() if _is_output(node)}
        inner = {key: node for key, node in nodes.items() if key not in outputs}
        if inner:
            ov_model.add_outputs([node.output(0) for node in inner.values()])
            values = list(self._compile(ov_model)(arrays).values())[1:]  # the added outputs follow the model's
            outputs |= {key: np.asarray(v) for key, v in zip(inner, values, strict=True)}
        return EndToEnd(outputs, output)


def _is_output(node) -> bool:
    return any(t.get_node().get_type_name() == "Result" for t in node.output(0).get_target_inputs())


def _layer_nodes(ov_model, units: list[Unit]) -> dict:
    """Each unit's node by layer key: the last node the frontend named after its module whose
    output has the layer's output shape (a module called n times: only where n such nodes are)."""
    by_path: dict[str, list] = {}
    for node in ov_model.get_ordered_ops():
        name = node.get_friendly_name()
        if node.get_type_name() in NOT_NODES or not name.startswith(MODULE + WRAPPED):
            continue
        by_path.setdefault(name.removeprefix(MODULE + WRAPPED).partition("/")[0], []).append(node)
    calls_of: dict[str, list] = {}
    for unit in units:
        calls_of.setdefault(unit.calls[0].path, []).append(unit.calls[0])
    found = {}
    for path, calls in calls_of.items():
        shape = tuple(calls[0].output.shape)
        shaped = [n for n in by_path.get(path, []) if tuple(n.get_output_partial_shape(0).to_shape()) == shape]
        if len(calls) == 1 and shaped:
            found[calls[0].key] = shaped[-1]
        elif len(shaped) == len(calls) and all(tuple(c.output.shape) == shape for c in calls):
            found.update({c.key: n for c, n in zip(calls, shaped, strict=True)})
    return found


def cpu_capabilities() -> list[str]:
    """What OpenVINO's CPU plugin says this CPU computes natively (`OPTIMIZATION_CAPABILITIES`:
    FP32, FP16, BF16, INT8, ...): the one probe the port, and the tests of it, decide by."""
    import openvino

    return list(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def precision(reduced: bool) -> tuple[str, str] | str:
    """(the CPU plugin's precision hint, the format it is judged in), or why it is absent: float32,
    or the `reduced` precision this CPU computes natively."""
    if not reduced:
        return "f32", "float32"
    capabilities = cpu_capabilities()
    for capability, hint in HINTS.items():
        if capability in capabilities:
            return cpu_levels.onednn_capped(hint[0]) or hint
    return (
        "this CPU computes neither f16 nor bf16 natively "
        f"(OpenVINO's CPU capabilities: {', '.join(capabilities) or 'none reported'})"
    )


def openvino_port(name: str, model, inputs, reduced: bool) -> OpenVinoPort | str:
    absent = missing("openvino")
    if absent:
        return absent
    found = precision(reduced)
    if isinstance(found, str):
        return found
    return OpenVinoPort(name, model, inputs, *found)
