"""Which implementations a stack difference touches: the rest are `opbench compare`'s controls."""

from __future__ import annotations

import pytest

from accuracy.report.stack import parts_used

# the docs' BLAS matrix (numpy 2.3.5 + scipy-openblas32 0.3.27 -> numpy 2.4.6 + 0.3.30), as flattened
MATRIX = [
    "blas numpy-openblas",
    "blas scipy-openblas32",
    "package numpy",
    "package scipy-openblas32",
    "threadpool libscipy_openblas64_-32a4b2a6.so",
]


@pytest.mark.parametrize(
    ("backend", "used"),
    [
        ("numpy", ["blas numpy-openblas", "package numpy"]),
        ("scipy", ["blas numpy-openblas", "package numpy"]),
        ("blas-scipy-openblas32", ["blas scipy-openblas32", "package scipy-openblas32"]),
        ("blas-numpy-openblas", ["blas numpy-openblas", "package numpy"]),
        ("blas-scipy-openblas", []),  # scipy's own OpenBLAS: the matrix leaves it alone (issue 44's 2.17x gemv)
        ("blas-mkl", []),
        ("torch", []),
        ("torch-compile", []),
        ("my-plugin", MATRIX),  # a backend this table does not know runs on everything
    ],
)
def test_the_blas_matrix_changes_numpy_scipy_and_the_wheel_only(backend, used):
    assert parts_used(backend, MATRIX) == used


@pytest.mark.parametrize("part", ["python", "knob OPENBLAS_CORETYPE", "package opbench"])
def test_the_interpreter_knobs_and_harness_change_every_implementation(part):
    assert all(parts_used(backend, [part]) == [part] for backend in ("numpy", "torch", "blas-mkl"))


def test_torch_parts_touch_torch_alone():
    parts = ["package torch", "torch cpu capability", "package jaxlib"]
    assert parts_used("torch", parts) == parts[:2] and parts_used("libtorch", parts) == parts[:2]
    assert parts_used("jax", parts) == ["package jaxlib"] and parts_used("numpy", parts) == []
