"""LiteRT (litert_torch.convert -> .tflite, run by ai_edge_litert's interpreter): not installable
beside the pinned stack, so the port is listed and absent with the reason."""

from __future__ import annotations

from accuracy.workflows.model.ports.deploy import missing

# Measured with uv against constraints.txt: litert-torch 0.10.0 needs ai-edge-litert[model-utils] >= 2.3.0,
# whose xdsl 0.28.0 needs typing-extensions < 4.13 while ai-edge-litert 2.3.0 itself pins 4.16.0;
# every earlier litert-torch needs torch < 2.13 or the same extra.
UNRESOLVABLE = (
    "litert-torch does not install beside torch 2.13.0: ai-edge-litert 2.3.0 pins typing-extensions 4.16.0 "
    "and its model-utils extra (xdsl 0.28.0) needs < 4.13"
)


def litert_port(name: str, model, inputs) -> str:
    """Why the port is absent: the runtime is not installed, or (installed by hand) not wired here."""
    if missing("litert_torch", "ai_edge_litert"):
        return UNRESOLVABLE
    return "litert-torch is installed by hand, but this opbench has no LiteRT port: " + UNRESOLVABLE
