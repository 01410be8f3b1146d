"""The quantization causes' fits in closed form (issue 55): integers quantized per tensor under
per-channel steps give back the tensor's step, and a point's clipping is named as the bug its
range and zero point say."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.workflows.model.onnx_noise import ActivationRange
from accuracy.workflows.model.quantization_causes import (
    OTHER_RANGE,
    PER_TENSOR,
    STUCK_ZERO,
    _clipping_cause,
    hypotheses,
)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(2, 12), columns=st.integers(2, 24))
def test_per_tensor_integers_under_per_channel_steps_give_back_the_tensors_step(seed, rows, columns):
    """A Linear's weight quantized with one step for the tensor (max |w| / 127), dequantized with
    its rows' own steps: the fit finds that step, to the rounding of the integers."""
    rng = np.random.Generator(np.random.PCG64(seed))
    module = torch.nn.Linear(columns, rows).double()
    weight = rng.standard_normal((rows, columns)) * rng.uniform(0.1, 3.0, (rows, 1))  # rows of other sizes
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(weight))
    steps, tensor_step = np.abs(weight).max(axis=1) / 127, np.abs(weight).max() / 127
    given_weight = np.rint(weight / tensor_step) * steps[:, None]  # the integers' step is not the one applied
    declared = {"weight": given_weight, "scale": steps, "zero_point": np.zeros(rows), "axis": 0, "transposed": False}
    found = {h.name: h for h in hypotheses(module, declared)}
    if np.ptp(steps) <= 0.02 * steps.max():  # rows of one size: a per-tensor step is no other computation
        assert PER_TENSOR not in found
        return
    fitted = found[PER_TENSOR].parameters["tensor_step"]
    assert fitted == pytest.approx(tensor_step, rel=0.02)  # the integers rounded: half a step each, at most
    changed = found[PER_TENSOR].module.weight.detach().numpy()
    np.testing.assert_allclose(changed, weight * steps[:, None] / fitted, rtol=1e-12)


def _point(zero_point: int, below: int, above: int) -> ActivationRange:
    scale = 0.01
    return ActivationRange("v", scale, zero_point, 0, 255, -zero_point * scale, (255 - zero_point) * scale,
                           -1.2, 1.3, below, above, 100)  # fmt: skip


def test_a_clipping_point_is_a_stuck_zero_point_where_its_unsigned_zero_point_is_0_and_it_clips_below():
    name, _, parameters = _clipping_cause(_point(0, 40, 0), [])
    assert name == STUCK_ZERO and parameters == {"zero_point": 120, "clipped_fraction": 0.4}  # 1.2 / 0.01
    name, _, parameters = _clipping_cause(_point(120, 0, 5), [])  # a range too narrow above
    assert name == OTHER_RANGE and parameters == {"low": -1.2, "high": 1.3}
    assert _clipping_cause(_point(0, 0, 5), [])[0] == OTHER_RANGE  # zero point 0, clipping above only


@pytest.mark.parametrize("runtime", ["openvino", "executorch", "onnxruntime"])
def test_a_flagged_output_says_which_clipping_causes_its_runtime_is_not_tried_for(runtime):
    """An output 10x its predicted noise, from a runtime whose error model has no runs with one
    point's clipping alone: OpenVINO's and ExecuTorch's say, in `skipped`, that the stuck zero point
    and the other calibration were not tried, and why; an ONNX graph's (which has them) does not."""
    from accuracy.workflows.model.quantization import BEYOND, end_to_end

    reference = np.linspace(-1.0, 1.0, 40)
    step = 0.01
    noise = {"variance": np.full(40, step**2 / 12), "clipping": np.zeros(40), "clipped": 0, "points": [{}] * 3}
    noise["runtime"] = runtime
    end = end_to_end(reference + 10 * step / np.sqrt(12) * np.where(np.arange(40) % 2, 1.0, -1.0), reference, noise)
    assert end.verdict == BEYOND and end.cause is None
    skipped = {s["name"]: s["reason"] for s in end.skipped or []}
    if runtime == "onnxruntime":
        assert skipped == {}
    else:
        assert set(skipped) == {STUCK_ZERO, OTHER_RANGE} and all(
            "one point's clipping alone" in r for r in skipped.values()
        )
