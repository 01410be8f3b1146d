"""The memory `opbench model` needs, estimated after the reference run and before any port is
built, from what its peak holds: the libraries it runs, copies of the model's weights, and the
reference's activations (every layer's inputs and output).

- Weights: the model itself, and at once the largest of the judge's float64 copy of a unit (a
  parent unit's is the whole model's: twice its float32 bytes, converted from a copy at the
  port's precision) and the port being run (ports run one at a time, each closed before the
  next): an exported ONNX port's export, then one session at a time reading the weights from its
  file; TorchScript's C++ modules and the leaves it traced. Held here per port (`WEIGHT_COPIES`).
- Activations: each port's isolated and end-to-end outputs are kept until judging, beside the
  float64 reference's and PyTorch's own at the port's dtype (`ACTIVATION_FACTOR`, per byte of
  them all), and the judge's Monte Carlo runs of one unit at a time (`LARGEST_CALL_FACTOR`, per
  byte of the largest call's inputs and output: a CNN's first convolutions are a quarter of all
  its activations, a transformer's largest call 1% of them).

The constants are measured peaks (scripts/measure_models.py, docs/models.md "Memory"), rounded
up: the estimate must refuse what would not fit, and accept what does.
"""

from __future__ import annotations

from collections.abc import Sequence

from accuracy.workflows.array_files import byte_size, check_memory

# torch, ONNX Runtime, transformers and the judge imported (0.33 GiB with small_cnn), and what the
# allocator holds beyond the arrays: small_cnn on 8,192 images peaked at 0.88 GB alone and 1.97 GB
# in a fresh clone's full `make test` (2026-11-29), which 1 GiB here had not covered
RUNTIME_BYTES = 2 << 30
JUDGE_COPIES = 3  # a whole-model unit in float64 (2) beside its copy at the port's precision (1)
WEIGHT_COPIES = {"onnxruntime": 2, "onnxruntime-noopt": 2, "torchscript": 2}  # the export, then a session
OTHER_PORT_COPIES = 3  # a port this table does not measure: its model, its run's copy, and one more
ACTIVATION_FACTOR = 8  # bytes held per byte of the reference's activations
LARGEST_CALL_FACTOR = 40  # and per byte of its largest call's (small_cnn: 16 per byte of all, a quarter in one call)
MODEL_MEMORY_FRACTION = 1.0  # all the memory available now: the estimate is an upper one


def model_bytes(model) -> int:
    """The bytes of the model's parameters and buffers, each counted once (tied weights share)."""
    held = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in held.values())


def call_bytes(calls) -> list[int]:
    """The bytes of each layer call's tensor inputs and output in the reference run."""
    import torch

    return [sum(t.nbytes for t in (*c.inputs, c.output) if isinstance(t, torch.Tensor)) for c in calls]


def needed_bytes(weights: int, calls: Sequence[int], ports: Sequence[str]) -> int:
    """The estimated peak of a run of `ports` on a model of `weights` bytes whose reference run's
    calls hold `calls` bytes each."""
    copies = max([JUDGE_COPIES, *(WEIGHT_COPIES.get(p, OTHER_PORT_COPIES) for p in ports)])
    activations = ACTIVATION_FACTOR * sum(calls) + LARGEST_CALL_FACTOR * max(calls, default=0)
    return RUNTIME_BYTES + weights * (1 + copies) + activations


def check_model_memory(model, calls, ports: Sequence[str], source: str) -> None:
    """Refuse, in one line, a model whose run would need more than the memory available now."""
    weights, held = model_bytes(model), call_bytes(calls)
    what = f"the model's weights ({byte_size(weights)}) and its activations on {source} ({byte_size(sum(held))})"
    check_memory(needed_bytes(weights, held, ports), what, MODEL_MEMORY_FRACTION)
