"""A port brought as an activations file from any runtime (accuracy.workflows.model.activations_file)."""

from __future__ import annotations

import numpy as np

from accuracy.core.dtypes import format_of, is_floating
from accuracy.core.errors import OpbenchError
from accuracy.workflows.model.activations_file import END_TO_END, OUTPUT_KEY, input_key
from accuracy.workflows.model.ports.base import EndToEnd, Feed, Port
from accuracy.workflows.model.unit import Unit


class FilePort(Port):
    """Its units are judged on the inputs the file gives them (the runtime's own), not the reference's."""

    runtime = "unknown"  # the file says nothing of the kernels that wrote it: no runtime's limit applies
    brought = True

    def __init__(self, name: str, arrays: dict[str, np.ndarray]):
        self.name, self.arrays = name, arrays
        self.description = "an activations file"
        floating = [k for k, a in arrays.items() if "/" not in k and is_floating(a)]
        if not floating:
            raise OpbenchError(f"--activations {name}: the file holds no floating layer output to judge")
        formats: dict[str, str] = {}  # format -> its first key, in sorted order: never the file's order
        for key in sorted(floating):
            formats.setdefault(format_of(arrays[key]).name, key)
        if len(formats) > 1:  # judged in the first key's format, the verdict hung on the order of keys
            mixed = ", ".join(f"{fmt} ({key!r}, ...)" for fmt, key in sorted(formats.items()))
            raise OpbenchError(
                f"--activations {name}: its layer outputs mix {mixed}; a port is judged in one format: "
                "save every output in the format the runtime computes in"
            )
        self.fmt = format_of(arrays[floating[0]])

    def units(self, calls):
        return [
            Unit([c], c.reason or ("" if c.key in self.arrays else "the activations file has no output for it"))
            for c in calls
            if c.leaf or c.key in self.arrays  # a parent module where the runtime gave its output
        ]

    def inputs_for(self, unit) -> Feed | str:
        from accuracy.backends import get_backend

        call = unit.calls[0]
        keys = [input_key(call, i) for i in range(len(call.inputs))]
        if not all(k in self.arrays for k in keys):
            return "the activations file has no inputs for it"
        return Feed([get_backend("torch").to_native(self.arrays[k]) for k in keys], self.name)

    def isolated(self, unit, inputs):
        return self.arrays[unit.last]

    def end_to_end(self, inputs, units) -> EndToEnd:
        """The runtime's own end-to-end activations where the file has them (`e2e/` keys), else its
        layer outputs (which are the end-to-end run where the runtime ran whole)."""
        own = {k.removeprefix(END_TO_END): a for k, a in self.arrays.items() if k.startswith(END_TO_END)}
        source = own if own else self.arrays
        outputs = {k: a for k, a in source.items() if "/" not in k and k != OUTPUT_KEY}
        return EndToEnd(outputs, source.get(OUTPUT_KEY, self.arrays[OUTPUT_KEY]))
