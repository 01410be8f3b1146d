"""Is a quantized output's error the quantization noise its port declared, or more?

A quantize point of step s rounds to a grid: its error is uniform on [-s/2, s/2], of variance
s^2/12 (rms s/sqrt(12), the 0.289 TensorFlow Lite's debugger calls well quantized), plus the
clipping of values outside its integer range, which is deterministic and counted apart. The
points' noise carried through a unit (accuracy.workflows.model.onnx_noise) predicts the rms error of a
correct port's output; the port's measured rms error over that prediction is the unit's ratio.

A correct port's ratio is about 1 on many elements; on few it is one draw of a sum of squares of
about n independent terms. WITHIN_FACTOR (times the chi-square spread at n elements, one in
1e4 a false alarm) is where it stops being noise; BEYOND_FACTOR times the noise is a different
computation (a wrong scale, a shifted zero point), not an unlucky draw.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

NOISE_SAMPLES = 16  # draws of every point's noise at most: the predicted rms to about 1/sqrt(2 * draws * n)
FEWEST_SAMPLES = 4
SAMPLED_ELEMENTS = 4096  # draws x output elements: enough for the predicted rms to 1%
NOISE_SEED = 0  # PCG64: the same draws on every run
# the model's own margin: first order; Q -> DQ twice on one grid counted twice; a fused int8 kernel
# rounds its output in fixed point where the graph rounds in float: the largest ratio of a correct
# port measured is 1.58 (small_cnn's conv2 per tensor, 144 elements), 1.51 on resnet18's
# layer2.1.conv1 per tensor (200704 elements); a bug measured least is 6.7x (u8s8 saturation)
WITHIN_FACTOR = 2.0
FALSE_ALARM = 1e-4  # the chance a correct port's rms exceeds the spread allowed at n elements
BEYOND_FACTOR = 10.0  # ratio past which the unit computes something else: beyond, not suspicious


def samples(elements: int) -> int:
    """How many draws of the noise predict an output of `elements` values to about 1%: fewer on
    large outputs (resnet18's convolutions), where one draw averages over many elements."""
    return max(FEWEST_SAMPLES, min(NOISE_SAMPLES, math.ceil(SAMPLED_ELEMENTS / max(elements, 1))))


def integer_range(dtype: Any) -> tuple[int, int]:
    """The integers a quantized dtype holds (uint8 0..255, int8 -128..127, int32 ...)."""
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def spread(elements: int) -> float:
    """How far above 1 the rms of `elements` draws of a noise can come by chance (one in
    FALSE_ALARM): sqrt(chi2 quantile / n)."""
    from scipy.stats import chi2

    n = max(int(elements), 1)
    return math.sqrt(float(chi2.isf(FALSE_ALARM, n)) / n)


def threshold(elements: int) -> float:
    """The ratio to the predicted noise a correct port stays under at `elements` output elements."""
    return WITHIN_FACTOR * spread(elements)


def rms(values: np.ndarray) -> float:
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    return float(np.sqrt(np.mean(v * v))) if v.size else 0.0


def sqnr_db(signal: np.ndarray, error: np.ndarray) -> float:
    """Signal to quantization noise in dB, 10 log10(|signal|^2 / |error|^2) (PyTorch's and ONNX
    Runtime's qdq_loss_debug's figure); inf where the error is 0."""
    s, e = rms(signal), rms(error)
    if e == 0:
        return math.inf
    return 20.0 * math.log10(s / e) if s > 0 else -math.inf
