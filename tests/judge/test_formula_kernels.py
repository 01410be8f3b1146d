"""Pointwise kernels that compute a formula whose steps cancel (torch_emulation.FORMULA_OPS): GELU's
1 + erf(x / sqrt 2) for negative x. Every correct float32 GELU (torch's, ONNX Runtime's) computes
that formula, so one ulp of erf's result there is many ulps of the output; the typical tier models
each step, not one rounding of the result."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from accuracy.core.dtypes import FORMATS
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.check import function_evidence

FLOAT32 = FORMATS["float32"]
# ONNX Runtime's (graph optimizations on) GELU of BERT-base's encoder.layer.5.intermediate, the
# element its run flagged at 1.06x the threshold when GELU was modelled as one rounding: 15.8 ulp,
# about one ulp of erf's result (0.942) carried to an output of 0.055
ORT_INPUT, ORT_OUTPUT = -1.8961087465286255, -0.054935701191425323


def _gelu(in0: torch.Tensor) -> torch.Tensor:
    return F.gelu(in0)


def _gelu_evidence(x: np.ndarray):
    own = F.gelu(torch.from_numpy(x)).numpy()
    reference = F.gelu(torch.from_numpy(x.astype(np.float64))).numpy()
    return function_evidence(_gelu, "gelu", "torch", {"in0": x}, FLOAT32, own, reference), own


def test_onnx_runtimes_gelu_in_its_negative_tail_is_within_rounding():
    x = np.array([ORT_INPUT, -0.5, 0.7, 2.0], dtype=np.float32)
    evidence, own = _gelu_evidence(x)
    port = own.copy()
    port[0] = np.float32(ORT_OUTPUT)
    exact = F.gelu(torch.tensor(ORT_INPUT, dtype=torch.float64)).item()
    assert abs(port[0] - exact) > 15 * np.spacing(np.float32(ORT_OUTPUT))
    assert evidence.judge(port, None, None, None).verdict == WITHIN


def test_the_allowance_follows_the_cancellation():
    """Where 1 + erf cancels (x = -3: 0.0027 of 2) the threshold in ulps of the output is hundreds of
    times what it is at x = 0.7; and a GELU off by 1% there is still flagged."""
    x = np.array([-3.0, 0.7], dtype=np.float32)
    evidence, own = _gelu_evidence(x)
    ulps = evidence.op.model.threshold / np.spacing(np.abs(own))
    assert ulps[0] > 100 * ulps[1] and ulps[1] < 16
    off = own.copy()
    off[0] *= np.float32(1.01)
    assert evidence.judge(off, None, None, None).verdict != WITHIN
