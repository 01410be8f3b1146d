"""Contractions with a bias, summed from the bias: a GEMM kernel that starts its accumulators at
the bias (XNNPACK's fully connected and convolution kernels, under ExecuTorch) rounds every term at
the bias's magnitude. Where the bias outweighs the products (a classifier's bias over the small
pooled features of a model with random weights) that error is many ulps, and the typical tier,
which modelled the bias added last, flagged ExecuTorch's correct Linear suspicious at 6.15x
(torchvision's ShuffleNetV2 `fc`) and RegNet's squeeze-excitation convolutions at 1.05-1.37x."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import FORMATS
from accuracy.judge.emulation import emulate
from accuracy.judge.verdicts import WITHIN, Evidence

FLOAT32 = FORMATS["float32"]


SHAPES = {  # the input, weight and bias shapes: 1024, 640 and 576 terms per output
    "linear": ((2, 1024), (8, 1024), (8,)),
    "conv1d": ((1, 128, 5), (4, 128, 5), (4,)),
    "conv2d": ((1, 64, 3, 3), (4, 64, 3, 3), (4,)),
}


def _bias_heavy(op_name: str) -> dict[str, np.ndarray]:
    """Features of 1e-5 after a ReLU, weights of 0.03 and a bias of 0.03: ShuffleNetV2's `fc` here."""
    rng = np.random.default_rng(5)
    x, w, b = SHAPES[op_name]
    names = ("x", "W", "b") if op_name == "linear" else ("x", "w", "b")
    values = (np.abs(rng.standard_normal(x)) * 1e-5, rng.standard_normal(w) * 0.03, rng.uniform(-0.03, 0.03, b))
    return {name: FLOAT32.round(v) for name, v in zip(names, values, strict=True)}


@pytest.mark.parametrize("op_name", ["linear", "conv1d", "conv2d"])
def test_a_kernel_that_sums_from_the_bias_is_within_rounding(op_name, tmp_path, monkeypatch):
    op = get_op(op_name)
    inputs = _bias_heavy(op_name)
    from_the_bias = emulate(op.working_formula, inputs, FLOAT32, "nearest").astype(np.float32)
    exact = op.fp64(**inputs)
    spacing = np.spacing(np.abs(from_the_bias))
    assert np.max(np.abs(from_the_bias - exact) / spacing) > 5  # ulps of the bias's spacing, term by term
    monkeypatch.setenv("OPBENCH_CACHE", str(tmp_path / "now"))  # typical models are cached by op name
    assert Evidence(op, inputs, FLOAT32).judge(from_the_bias, None).verdict == WITHIN
    monkeypatch.setenv("OPBENCH_CACHE", str(tmp_path / "before"))
    bias_last = dataclasses.replace(op, working=None)  # the model before: the products summed, then the bias
    assert Evidence(bias_last, inputs, FLOAT32).judge(from_the_bias, None).verdict != WITHIN


def test_a_kernel_that_sums_from_the_bias_is_the_loop_it_models():
    """The emulated formula is that loop bit for bit: acc = b; acc += x_k w_k, each step rounded."""
    inputs = _bias_heavy("linear")
    x, W, b = inputs["x"], inputs["W"], inputs["b"]
    acc = np.broadcast_to(b, (x.shape[0], b.size)).astype(np.float32)
    for k in range(x.shape[1]):
        acc = (acc + (x[:, k : k + 1] * W[:, k]).astype(np.float32)).astype(np.float32)
    assert np.array_equal(acc, emulate(get_op("linear").working_formula, inputs, FLOAT32, "nearest"))
