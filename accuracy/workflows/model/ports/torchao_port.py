"""torchao's int8 ports: the model with its Linear layers quantized by `torchao.quantization.quantize_`
(`torchao-int8-weight`: `Int8WeightOnlyConfig`; `torchao-int8-dynamic`:
`Int8DynamicActivationInt8WeightConfig`), run by PyTorch, judged against their quantization noise
(accuracy.workflows.model.quantization).

A quantized Linear's weight is torchao's `Int8Tensor`: int8 integers and one step per output row
(symmetric, `scale` = max |row| / 127), read from the module. Its noise is carried through the
Linear in closed form, the layer being linear: the weight's rounding gives each output element
the variance sum_i x_i^2 s_j^2 / 12; the dynamic port also rounds each row of its input to its own
symmetric step (max |row| / 127.5, torchao's per-row mapping), which adds
(s_row^2 / 12) sum_i W_ji^2. End to end, the float model is run with each quantized Linear's output
perturbed by Gaussian noise of that variance (PCG64, seed 0), and the output's spread measured.
The other layers are PyTorch's own float32 modules, judged against rounding.
"""

from __future__ import annotations

import copy

import numpy as np

from accuracy.backends import cpu_levels
from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.errors import quiet_stderr
from accuracy.judge.quantization import NOISE_SAMPLES, NOISE_SEED
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.ports.deploy import missing
from accuracy.workflows.model.trace import converted, record, run_calls, typed_inputs
from accuracy.workflows.model.unit import Unit, leaf_units, port_inputs

SYMMETRIC_ROW = 127.5  # torchao's symmetric int8 per-row step: max |row| / ((127 - -128) / 2)


def _config(dynamic: bool):
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig

    return Int8DynamicActivationInt8WeightConfig() if dynamic else Int8WeightOnlyConfig()


def _quantized_weight(module):
    """The module's torchao int8 weight (integers and per-row steps), or None."""
    weight = getattr(module, "weight", None)
    return weight if weight is not None and hasattr(weight, "qdata") and hasattr(weight, "scale") else None


def linear_variance(x: np.ndarray, weight: np.ndarray, steps: np.ndarray, dynamic: bool) -> np.ndarray:
    """Each output element's predicted variance of a Linear y = x W^T + b whose weight rows are
    rounded to `steps` (and, `dynamic`, each row of x to its own symmetric step)."""
    x = np.asarray(x, np.float64)
    variance = np.sum(x * x, axis=-1, keepdims=True) * (np.asarray(steps, np.float64).reshape(-1) ** 2 / 12.0)
    if dynamic:
        row_steps = np.max(np.abs(x), axis=-1, keepdims=True) / SYMMETRIC_ROW
        variance = variance + row_steps**2 / 12.0 * np.sum(np.asarray(weight, np.float64) ** 2, axis=-1)
    return variance


def declared(path: str, module) -> dict:
    """A quantized Linear's weight as the quantization causes read it (accuracy.workflows.model.onnx_noise's
    `declared_weights` form): dequantized from its integers, its per-row steps and zero points along
    axis 0; and its runtime, which names the causes that cannot apply to it
    (quantization_causes.CANNOT_APPLY)."""
    weight = _quantized_weight(module)
    steps = to_numpy(weight.scale.float()).reshape(-1).astype(np.float64)
    zero = getattr(weight, "zero_point", None)
    entry = {
        "node": path,
        "weight": to_numpy(weight.dequantize().float()).astype(np.float64),
        "scale": steps,
        "zero_point": np.zeros(steps.shape) if zero is None else to_numpy(zero).reshape(-1),
        "axis": 0 if steps.size > 1 else None,
        "transposed": False,
    }
    return {"weights": [entry], "runtime": "torchao"}


class TorchaoPort(Port):
    """The model with torchao's int8 Linear layers, one unit per leaf call."""

    runtime = "torchao"

    def __init__(self, name: str, model, dynamic: bool = False):
        import torch

        with quiet_stderr():  # torchao's CUDA kernels' libraries, which a CPU build cannot load, on stderr
            from torchao.quantization import quantize_

        self.name, self.dynamic = name, dynamic  # activations quantized per row at run time too
        self.float_model = converted(model, torch.float32).eval()
        self.quantized = copy.deepcopy(self.float_model)
        quantize_(self.quantized, _config(dynamic))
        how = "int8 weights, activations int8 per row at run time" if self.dynamic else "int8 weights only"
        self.description = f"torchao {how} (quantize_ on its Linear layers), run by PyTorch"
        self.noise: dict[str, dict] = {}

    def units(self, calls):
        return leaf_units(calls)

    def _variance(self, module, x) -> np.ndarray | None:
        weight = _quantized_weight(module)
        if weight is None:
            return None
        dequantized = to_numpy(weight.dequantize().float())
        return linear_variance(to_numpy(x.float()), dequantized, to_numpy(weight.scale.float()), self.dynamic)

    def _point(self, module) -> dict:
        weight = _quantized_weight(module)
        steps = to_numpy(weight.scale.float()).reshape(-1)
        points = [
            {"value": "weight", "kind": "weight", "scale": [float(steps.min()), float(steps.max())], "zero_point": 0,
             "axis": 0, "channels": int(steps.size), "range": [-128, 127]}
        ]  # fmt: skip
        if self.dynamic:
            points.append({"value": "input", "kind": "dynamic", "scale": None, "zero_point": 0, "axis": -1,
                           "channels": 1, "range": [-128, 127]})  # fmt: skip
        return {"points": points}

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        import torch

        modules = [self.quantized.get_submodule(c.path) for c in unit.calls]
        args = port_inputs(inputs, self.fmt)
        with torch.no_grad():
            out = to_numpy(run_calls(unit.calls, modules, [a.clone() for a in args]))
        variance = self._variance(modules[0], args[0]) if len(modules) == 1 and args else None
        if variance is not None and variance.shape == out.shape:
            facts = {"variance": variance, "clipping": np.zeros(out.shape), "clipped": 0, "output_scale": None}
            self.noise[unit.key] = facts | self._point(modules[0]) | declared(unit.key, modules[0])
        return out

    def end_to_end(self, inputs, units) -> EndToEnd:
        import torch

        feeds = typed_inputs(inputs, self.fmt)
        with torch.no_grad():
            calls, out = record(self.quantized, feeds)
        run = EndToEnd(
            {c.key: to_numpy(c.output) for c in calls if c.output is not None},
            to_numpy(out),
            {c.key: [to_numpy(t) for t in c.inputs] for c in calls},
        )
        run.noise = self._whole_noise(feeds)
        return run

    def _whole_noise(self, feeds: dict) -> dict:
        """The output's predicted variance: the float model run with each quantized Linear's
        output perturbed by noise of its predicted variance, over NOISE_SAMPLES draws."""
        import torch

        from accuracy.workflows.model.trace import first_tensor

        rng = np.random.Generator(np.random.PCG64(NOISE_SEED))
        noisy = {"on": False}

        def perturb(quantized):
            def hook(module, args, output):
                if not noisy["on"]:
                    return output
                variance = self._variance(quantized, args[0])
                draw = rng.standard_normal(variance.shape) * np.sqrt(variance)
                return output + torch.from_numpy(draw).to(output.dtype)

            return hook

        handles = [
            self.float_model.get_submodule(path).register_forward_hook(perturb(module))
            for path, module in self.quantized.named_modules()
            if _quantized_weight(module) is not None
        ]
        try:
            with torch.no_grad():
                base = to_numpy(first_tensor(self.float_model(**{k: v.clone() for k, v in feeds.items()})))
                noisy["on"] = True
                squares = np.zeros(base.shape)
                for _ in range(NOISE_SAMPLES):
                    drawn = to_numpy(first_tensor(self.float_model(**{k: v.clone() for k, v in feeds.items()})))
                    squares += (drawn.astype(np.float64) - base) ** 2
        finally:
            for handle in handles:
                handle.remove()
        points = [
            p for m in self.quantized.modules() if _quantized_weight(m) is not None for p in self._point(m)["points"]
        ]
        return {
            "variance": squares / NOISE_SAMPLES,
            "clipping": np.zeros(base.shape),
            "clipped": 0,
            "points": points,
            "output_scale": None,
        }


def torchao_port(name: str, model, inputs, *, dynamic: bool) -> TorchaoPort | str:
    """`torchao-int8-weight` and `torchao-int8-dynamic` (`dynamic`); absent where torchao is not
    installed, and the dynamic port where oneDNN cannot run this CPU's int8 (its int8 x int8
    products are torch._int_mm's, which picks oneDNN's VNNI path by the CPU)."""
    why = missing("torchao") or (cpu_levels.onednn_capped("int8") if dynamic else None)
    return why if why is not None else TorchaoPort(name, model, dynamic)
