"""A runtime's known limits: declared findings that can explain a model unit's excess.

A finding (`Impl.finding`, docs/findings.md) says that a library's kernel leaves the rounding
bound. In `opbench model`, a unit that a port computes with such a kernel is then not within
rounding although the port is right: ONNX Runtime computes SiLU as x * Sigmoid(x), and its MLAS
Sigmoid keeps absolute accuracy, so the first MLP of every Llama-family model was flagged. A
record here gives the finding an error model (`Approximation`: the kernel's step with its
measured absolute error). A flagged unit is that runtime's limit only where its output is within
rounding once the model is in force; a real bug (SiLU ported as GELU, a changed eps) stays flagged.

Each record names the registry implementation whose finding it is; tests check that the finding
is declared and that the error model covers the real kernel (tests/catalog/test_runtime_limits.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from accuracy.judge.kernels import Approximation


@dataclass(frozen=True)
class RuntimeLimit:
    runtime: str  # the Port.runtime whose units it can explain
    op: str  # the registry op whose implementation declares the finding
    implementation: str  # that implementation's name in the op's record
    approximation: Approximation  # the kernel's error model
    words: str  # what the user reads: whose limit it is, and that it is not the port's


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

RUNTIME_LIMITS: tuple[RuntimeLimit, ...] = (MLAS_SIGMOID,)


def limits_of(runtime: str) -> tuple[RuntimeLimit, ...]:
    return tuple(limit for limit in RUNTIME_LIMITS if limit.runtime == runtime)
