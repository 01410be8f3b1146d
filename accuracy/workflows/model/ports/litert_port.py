"""LiteRT: litert_torch.convert -> .tflite, run by ai_edge_litert's interpreter, in an environment of
its own (environments.py) beside this torch, as a child process (child_process.py).

It cannot join opbench's own environment: litert-torch 0.10.0 (the release for torch 2.13) needs
ai-edge-litert[model-utils] 2.3.0, whose xdsl 0.28.0 declares typing-extensions < 4.13 while
ai-edge-litert 2.3.0 itself pins 4.16.0; every earlier litert-torch needs torch < 2.13. The conflict
is only in xdsl's metadata: with uv's override to 4.16.0 the converter imports, converts and runs
(measured: small_cnn, resnet18 and the decoder convert), so the port's environment is litert-torch
0.10.0 on this torch with that one override, rather than an earlier litert-torch on an older torch,
which would judge another PyTorch's conversion.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from accuracy.workflows.model.ports.base import Port
from accuracy.workflows.model.ports.child_process import Rebuild
from accuracy.workflows.model.ports.environments import environment, run_in_environment, shown, stack_pins, with_helpers

CONVERTER = "litert-torch==0.10.0"
OVERRIDES = ("typing-extensions==4.16.0",)  # xdsl 0.28.0's "< 4.13": metadata only (above)


def litert_environment(say) -> tuple[Path, dict] | str:
    """The port's environment (its python, what its build measured), built now or found built; or why
    not. `make setup` builds it once, so that its packages are in uv's cache for an offline rebuild."""
    torch = importlib.metadata.version("torch").partition("+")[0]
    pins = with_helpers("litert", [CONVERTER, f"torch=={torch}", *stack_pins(("torchvision",))])
    return environment(pins, say, OVERRIDES)


def litert_port(name: str, model, inputs: dict, rebuild: Rebuild) -> Port | str:
    """The leaves converted together as one program of independent parts (each alone where that
    fails) and the whole model once, run by the LiteRT interpreter in the port's environment."""

    def describe(child: dict, build: str) -> str:
        return (
            f"LiteRT: {CONVERTER} to .tflite, run by ai-edge-litert's interpreter, in its own environment "
            f"(torch {child['torch']}, override {', '.join(OVERRIDES)}; {build})"
        )

    return run_in_environment(name, litert_environment(shown(name)), model, inputs, rebuild, describe, "litert")
