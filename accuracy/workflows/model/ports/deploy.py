"""What the deploy runtimes' ports share (ExecuTorch, OpenVINO): a converter and a runtime, the
leaf units converted together as one program of independent parts, and the whole model converted
once.

Each leaf is its own part, fed its own inputs: nothing joins one part to another, so each computes
what it would converted alone. Converting them together pays the converter's and the runtime's
fixed costs once (resnet18's 60 leaves: ExecuTorch 46 s -> 5 s, OpenVINO 18 s -> 3 s here). Where
the program cannot be converted, each leaf is converted alone, and one the converter cannot take
alone is not compared, with the converter's one-line reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.errors import first_line
from accuracy.workflows.model.ports.base import FLOAT32, EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall, converted, first_tensor, typed_inputs
from accuracy.workflows.model.unit import Unit, port_inputs


def missing(*modules: str) -> str | None:
    """Why a runtime is absent (its first module not installed), or None; imports nothing."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install 'opbench[deploy]')"
    return None


def program_feed(tensors) -> list[np.ndarray]:
    """What a converted program is fed: floats as float32 (values already rounded to the port's format)."""
    return [to_numpy(t.float() if t.is_floating_point() else t) for t in tensors]


class ConvertedPort(Port):
    """A model as a deploy runtime runs it: `convert(module, example)` gives a program (a callable
    from float32/integer numpy arrays to its outputs, a list of numpy arrays). A runtime that shows
    its intermediate tensors overrides `end_to_end` to give them."""

    converter: str  # the converter's name in a unit's "not compared" reason

    def __init__(self, name: str, model, inputs: dict[str, np.ndarray]):
        self.name, self.model, self.input_names = name, model, list(inputs)
        self._programs: dict[tuple, Callable[[list[np.ndarray]], list]] = {}
        self._failures: dict[tuple, str] = {}
        self._together: _Together | None = None

    def convert(self, module, example: tuple):
        raise NotImplementedError

    def close(self) -> None:
        self._programs, self._together = {}, None

    def _key(self, call: LayerCall) -> tuple:
        return (call.path, tuple((tuple(t.shape), t.dtype) for t in call.inputs))

    def units(self, calls: list[LayerCall]) -> list[Unit]:
        """One unit per leaf call, converted here from the reference's inputs: all in one program,
        or each on its own where that program cannot be converted."""
        import torch

        units: list[Unit] = []
        convertible: list[LayerCall] = []
        for call in (c for c in calls if c.leaf):
            if why := self._not_convertible(call):
                units.append(Unit([call], why))
                continue
            units.append(Unit([call], "", {"part": len(convertible)}))
            convertible.append(call)
        self._together = None  # these calls' program, not an earlier call's
        if convertible:
            with contextlib.suppress(Exception), torch.no_grad():  # a leaf it cannot take: found below, alone
                self._together = _Together(self, convertible)
        if self._together is None:
            for unit in units:
                if not unit.reason:
                    unit.detail = {"program": self._convert_alone(unit.calls[0])}
                    unit.reason = self._failures.get(unit.detail["program"], "")
        return units

    def units_alone(self, calls: list[LayerCall]) -> list[Unit]:
        """One unit per leaf call, each converted alone: a quantized port's leaf calibrated on its
        own inputs (its ranges are the leaf's inputs' own, whichever program holds it)."""
        units = []
        for call in (c for c in calls if c.leaf):
            if why := self._not_convertible(call):
                units.append(Unit([call], why))
                continue
            key = self._convert_alone(call)
            units.append(Unit([call], self._failures.get(key, ""), {"program": key}))
        self._together = None
        return units

    def _convert_alone(self, call: LayerCall) -> tuple:
        import torch

        key = self._key(call)
        if key not in self._programs and key not in self._failures:
            try:
                with torch.no_grad():
                    self._programs[key] = self.convert(_out_of_place(call.module), tuple(call.inputs))
            except Exception as exc:  # any converter error: this unit alone cannot be converted
                self._failures[key] = f"{self.converter} cannot convert it alone: {first_line(exc, typed=True)}"
        return key

    def _not_convertible(self, call: LayerCall) -> str:
        """Why the converter cannot take this leaf call alone, or ""."""
        if call.reason or call.tensors_only:
            return call.reason
        return f"{self.converter} converts a module called on tensors alone: it takes other arguments"

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        arrays = program_feed(port_inputs(inputs, self.fmt))
        if self._together is not None:
            out = self._together.output(unit.detail["part"], arrays)
        else:
            out = self._programs[unit.detail["program"]](arrays)[0]
        return np.asarray(out).astype(self.fmt.np_dtype)

    def whole(self, inputs: dict[str, np.ndarray]) -> tuple:
        """(the whole model, giving only the output compared, as a float32 copy; its example inputs,
        floats in float32: a runtime takes float32 and computes in its own precision)."""
        import torch

        typed = typed_inputs(inputs, FLOAT32)
        tensors = tuple(typed[k].contiguous() for k in self.input_names)
        return first_output(converted(self.model, torch.float32).eval()), tensors

    def end_to_end(self, inputs, units) -> EndToEnd:
        """The whole model converted once and run: its output only."""
        import torch

        model, tensors = self.whole(inputs)
        with torch.no_grad():
            program = self.convert(model, tensors)
        return EndToEnd({}, np.asarray(program(program_feed(tensors))[0]))


class _Together:
    """The leaves as one program, run once on every leaf's reference inputs; a part fed other
    inputs runs the program again with only its own inputs changed."""

    def __init__(self, port: ConvertedPort, calls: list[LayerCall]):
        import torch

        class Parts(torch.nn.Module):
            def __init__(self, leaves, sizes):
                super().__init__()
                self.leaves, self.sizes = torch.nn.ModuleList(leaves), sizes

            def forward(self, *tensors):
                outputs, start = [], 0
                for leaf, size in zip(self.leaves, self.sizes, strict=True):
                    out = leaf(*tensors[start : start + size])
                    outputs.append(out if isinstance(out, torch.Tensor) else out[0])
                    start += size
                return tuple(outputs)

        self.sizes = [len(c.inputs) for c in calls]
        self.feeds = [program_feed(port_inputs(c.inputs, port.fmt)) for c in calls]
        # in eval mode, as its leaves (_out_of_place's copies) are: a conversion's key reads the mode
        parts = Parts([_out_of_place(c.module) for c in calls], self.sizes).eval()
        self.program = port.convert(parts, tuple(t for c in calls for t in c.inputs))
        self.outputs: list | None = None

    def output(self, part: int, arrays: list[np.ndarray]) -> np.ndarray:
        if self.outputs is None:
            self.outputs = self.program([a for feed in self.feeds for a in feed])
        if all(_same_bits(a, b) for a, b in zip(arrays, self.feeds[part], strict=True)):
            return self.outputs[part]
        feeds = [*self.feeds[:part], arrays, *self.feeds[part + 1 :]]
        return self.program([a for feed in feeds for a in feed])[part]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _out_of_place(module):
    """A float32 copy of a leaf to convert alone, computing out of place: an in-place activation
    (resnet's `ReLU(inplace=True)`) alone is a graph that writes its own input, which
    ExecuTorch's lowering rejects ("Could not find input in either buffer or input nodes");
    the values are the same."""
    import torch

    copy = converted(module, torch.float32).eval()
    for m in copy.modules():
        if getattr(m, "inplace", False):
            m.inplace = False
    return copy


WRAPPED = "model."  # the path prefix of the model's modules inside `first_output`'s wrapper


def first_output(model):
    """The model giving only the output opbench compares (a transformers output's first field)."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return first_tensor(self.model(*args))

    return FirstOutput()
