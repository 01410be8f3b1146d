"""A Keras model with a mapping {Keras layer name: torch layer key} (accuracy.workflows.model.ports.keras_port)."""

from __future__ import annotations

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.errors import OpbenchError
from accuracy.core.loading import load_function
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit, port_inputs


class KerasPort(Port):
    """A key is a module path, or `path#2` for a module's second call. Several Keras layers mapped
    to one key run in the model's order as that layer (a ZeroPadding2D before a Conv2D, a Permute
    before a Flatten)."""

    runtime = "tensorflow"
    brought = True

    def __init__(self, name: str, model, mapping: dict[str, str], calls: list[LayerCall], source: str):
        from accuracy.workflows.model.ports import keras_port

        keras_port.check_mapping(model, mapping, {c.key for c in calls}, source)
        self.name, self.model, self.keras = name, model, keras_port
        self.description = "a Keras model, its layers mapped to the torch layers"
        order = [layer.name for layer in model.layers]
        self.chains: dict[str, list[str]] = {}
        for layer in sorted(mapping, key=order.index):
            self.chains.setdefault(mapping[layer], []).append(layer)

    def units(self, calls):
        return [
            Unit([c], c.reason or ("" if c.key in self.chains else "the mapping names no Keras layer for it"))
            for c in calls
            if c.leaf
        ]

    def isolated(self, unit, inputs):
        arrays = [to_numpy(t) for t in port_inputs(inputs, self.fmt)]
        return self.keras.call_layers(self.model, self.chains[unit.key], arrays)

    def end_to_end(self, inputs, units) -> EndToEnd:
        compared = [u for u in units if not u.reason]
        names = [self.chains[u.key][-1] for u in compared]
        outputs, out = self.keras.run_layers(self.model, names, list(inputs.values()))
        return EndToEnd({u.key: outputs[self.chains[u.key][-1]] for u in compared}, out)


def keras_port(made, calls: list[LayerCall]) -> KerasPort:
    """The Keras port from (keras model, mapping), or from a factory MODULE:FUNCTION returning them."""
    source = f"--keras {made}" if isinstance(made, str) else "keras"
    if isinstance(made, str):
        from accuracy.backends import start_tensorflow

        start_tensorflow()  # before any Keras layer starts TF's runtime
        try:
            made = load_function(made, "--keras")()
        except OpbenchError:
            raise
        except Exception as exc:
            raise OpbenchError(f"{source}: the factory failed: {type(exc).__name__}: {exc}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict)):
        raise OpbenchError(f"{source}: expected (keras model, {{Keras layer name: torch module path}})")
    return KerasPort("keras", made[0], made[1], calls, source)
