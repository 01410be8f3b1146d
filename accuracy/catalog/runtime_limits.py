"""A runtime's known limits: declared findings that can explain a model unit's excess.

A finding (`Impl.finding`, docs/findings.md) says that a library's kernel leaves the rounding
bound. In `opbench model`, a unit that a port computes with such a kernel is then not within
rounding although the port is right: ONNX Runtime computes SiLU as x * Sigmoid(x), and its MLAS
Sigmoid keeps absolute accuracy, so the first MLP of every Llama-family model was flagged. A
record here gives the finding an error model (`Approximation`: the kernel's step with its
measured absolute error). A flagged unit is that runtime's limit only where its output is within
rounding once the model is in force; a real bug (SiLU ported as GELU, a changed eps) stays flagged.

A record names the registry implementation whose finding it is, where the registry's inputs reach
the limit; one that lies outside them (a kernel that flushes results below 1e-36 to 0, which
activations reach deep in a random-weight network) says what was measured instead. Tests check
that a named finding is declared and that each error model covers the real kernel
(tests/catalog/test_runtime_limits.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from accuracy.judge.kernels import Approximation


@dataclass(frozen=True)
class RuntimeLimit:
    runtime: str  # the Port.runtime whose units it can explain
    op: str  # the registry op whose kernel it is
    approximation: Approximation  # the kernel's error model
    words: str  # what the user reads: whose limit it is, and that it is not the port's
    implementation: str = ""  # the op's implementation that declares it as a finding, if the registry's inputs reach it
    measured: str = ""  # else what was measured, where the registry's inputs do not reach


MLAS_SIGMOID = RuntimeLimit(
    runtime="onnxruntime",
    op="sigmoid",
    implementation="Sigmoid",
    # measured: max |error| 1.66e-7 on 400,001 points of [-20, 20], 1.57e-7 on 23.1 million float32
    # values in (-100, 100) (every 97th bit pattern), against scipy's float64 expit
    approximation=Approximation(
        "sigmoid",
        1.7e-7,
        "ONNX Runtime's MLAS Sigmoid: |error| <= 1.7e-7, absolute",
        expands=frozenset({"silu"}),
    ),
    words="ONNX Runtime's Sigmoid (MLAS) keeps absolute, not relative, accuracy; not your port",
)

ATEN_SIGMOID_FLUSH = RuntimeLimit(
    runtime="torch",
    op="sigmoid",
    approximation=Approximation(
        "sigmoid",
        3.0e-39,
        "ATen's sigmoid and SiLU: exp(-x) overflows float32 below x = -88.72 and the result is 0, |error| <= 3e-39 "
        "(SiLU: |x| times that)",
        expands=frozenset({"silu"}),
    ),
    words="PyTorch's own sigmoid/SiLU give 0 below x = -88.72 (exp(-x) overflows float32); not your port",
    measured="every 97th float32 in (-120, 120): sigmoid and SiLU exact to 2.4 ulp, and 0 below -88.72 where the "
    "exact values are up to 2.94e-39 and 2.61e-37",
)

OPENVINO_SIGMOID = RuntimeLimit(
    runtime="openvino",
    op="sigmoid",
    approximation=Approximation(
        "sigmoid",
        1.7e-38,
        "OpenVINO's CPU Sigmoid and Swish: 0 below x = -86.99, |error| <= 1.7e-38, else within 6 ulp",
        expands=frozenset({"silu"}),
        ulps=6.0,
    ),
    words="OpenVINO's Sigmoid/Swish keep 6 ulp and give 0 below x = -86.99; not your port",
    measured="every 97th float32 in (-120, 120): Sigmoid to 5.6 ulp, Swish to 4.3 ulp away from its flush, and "
    "both 0 below -86.99 where the exact sigmoid is up to 1.66e-38",
)

RUNTIME_LIMITS: tuple[RuntimeLimit, ...] = (MLAS_SIGMOID, ATEN_SIGMOID_FLUSH, OPENVINO_SIGMOID)


def limits_of(runtime: str) -> tuple[RuntimeLimit, ...]:
    return tuple(limit for limit in RUNTIME_LIMITS if limit.runtime == runtime)
