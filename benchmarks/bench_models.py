"""asv benchmarks for `opbench model`: a small model's ports, timed end to end and judged per layer.

Per port (ONNX Runtime with and without graph optimizations, TorchScript, bfloat16) of
accuracy.workflows.model.zoo's small CNN (a few layers of resnet's kinds): the end-to-end run's
time, its output's normwise relative difference from the float64 model, and the worst layer
verdict as a tier (0 within rounding, 1 suspicious, 2 beyond rounding, 3 undetermined), so a
BLAS build or a framework upgrade that changes a layer shows on the graph. The model is small so
that `make bench` stays in its budget; `scripts/measure_models.py` measures resnet18 and BERT.
`DeployPorts` tracks the same for the deploy runtimes (ExecuTorch, OpenVINO), whose end-to-end
time includes converting the whole model, so that a runtime upgrade shows in the history.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar

from accuracy.run.profiles import current_profile

from .common import hide_outside_measure_pass, ready_to_fork

MODEL = "accuracy.workflows.model.zoo:small_cnn"
PORTS = ["onnxruntime", "onnxruntime-noopt", "torchscript", "bfloat16"]
DEPLOY_PORTS = ["executorch", "executorch-portable", "openvino", "openvino-f16"]


# torch and the model workflows are imported where they run, not with the suite: the server
# asv forks every benchmark process from stays small where nothing here runs (suite_passes.py)
def _judged(ports: list[str]) -> dict:
    """Every port judged once (the verdicts do not depend on the timing runs)."""
    from accuracy.judge.verdicts import NOT_COMPARED, tier
    from accuracy.workflows.array_files import write_arrays
    from accuracy.workflows.model.sweep import ModelRun, run_model
    from accuracy.workflows.model.zoo import example_inputs

    with tempfile.TemporaryDirectory() as tmp:
        inputs = write_arrays(Path(tmp) / "x.npz", example_inputs("small_cnn"))
        report = run_model(ModelRun(MODEL, inputs, ports))
    return {
        p.port: {
            "relative_error": p.output["relative_error"],
            "worst_tier": max(tier(r.verdict) for r in p.layers if r.verdict != NOT_COMPARED),
        }
        for p in report.ports
    }


class SmallModelPorts:
    params: ClassVar = [PORTS]
    param_names: ClassVar = ["port"]
    timeout = 600

    def setup_cache(self) -> dict:
        return _judged(PORTS)

    def setup(self, judged: dict, port: str) -> None:
        from accuracy.workflows.model.ports import build_port
        from accuracy.workflows.model.trace import load_model, record
        from accuracy.workflows.model.zoo import example_inputs

        self.inputs = example_inputs("small_cnn")
        model = load_model(MODEL)
        self.port = build_port(port, model, self.inputs)
        calls, _ = record(model, self.inputs)
        self.units = self.port.units(calls)
        for unit in self.units:  # traced / exported pieces are built before the timing
            if not unit.reason:
                self.port.isolated(unit, unit.calls[0].inputs)

    def time_end_to_end(self, judged: dict, port: str) -> None:
        self.port.end_to_end(self.inputs, self.units)

    def track_output_relative_error(self, judged: dict, port: str) -> float:
        return judged[port]["relative_error"]

    track_output_relative_error.unit = "relative error"

    def track_worst_layer_tier(self, judged: dict, port: str) -> int:
        return judged[port]["worst_tier"]

    track_worst_layer_tier.unit = "tier (0 within rounding .. 3 undetermined)"


# The full profile's: judging and converting four runtimes' ports takes about 30 s more, which the
# quick and default runs' budgets do not hold.
if current_profile().name == "full":

    class DeployPorts(SmallModelPorts):
        """A conversion per timing: one sample of each, a few times (a port whose runtime is not
        installed is skipped)."""

        params: ClassVar = [DEPLOY_PORTS]
        number, repeat, warmup_time = 1, 3, 0

        def setup_cache(self) -> dict:  # its own: asv keys a cache by where setup_cache is defined
            return _judged(DEPLOY_PORTS)

        def setup(self, judged: dict, port: str) -> None:
            from accuracy.workflows.model.ports import build_port
            from accuracy.workflows.model.trace import load_model, record
            from accuracy.workflows.model.unit import leaf_units
            from accuracy.workflows.model.zoo import example_inputs

            if port not in judged:
                raise NotImplementedError(f"{port} is absent here")  # asv: skipped
            self.inputs = example_inputs("small_cnn")
            model = load_model(MODEL)
            self.port = build_port(port, model, self.inputs)
            self.units = leaf_units(record(model, self.inputs)[0])  # end to end needs no unit converted


hide_outside_measure_pass(globals())  # `opbench run`'s read pass runs the generated tracks only
ready_to_fork()
