"""Input causes (preprocessing, the DJL seed): the port's first layer received another input than
the reference model's, because the port prepared it otherwise: BGR for RGB, another mean and std,
pixels in [0, 255] for [0, 1] (or the other way), or an image quantised to uint8.

The subject is `ModelInput`, the identity on the reference model's input, which each cause changes
into the port's preprocessing relative to it; `input_rows` judges a port's first-layer input
against the model's (the one judge, a `ModelInput` unit) and names the cause where it differs.
Another resize cannot be tested here: the original image, which both resized, is not in the files.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from accuracy.workflows.model.causes.cause import Cause, with_attribute

KIND = "ModelInput"
UINT8_LEVELS = 255


class ModelInput(nn.Module):
    """The reference model's input as a port's preprocessing gives it, relative to the model's own:
    the identity until a cause sets one of its attributes."""

    def __init__(self):
        super().__init__()
        self.channels_reversed = False  # BGR for RGB: the channel axis (1) reversed
        self.scale = 1.0  # x * scale: [0, 255] pixels for [0, 1] (255), or the other way (1/255)
        self.normalized: tuple | None = None  # (mean, std) per channel: (x - mean) / std
        self.levels: int | None = None  # quantised to `levels` steps over [0, 1] (uint8: 255)

    def forward(self, x):
        if self.channels_reversed:
            x = x.flip(1)
        if self.normalized is not None:
            shape = (1, -1) + (1,) * (x.ndim - 2)
            mean, std = (torch.tensor(v, dtype=x.dtype).reshape(shape) for v in self.normalized)
            x = (x - mean) / std
        if self.scale != 1.0:
            x = x * self.scale
        if self.levels is not None:
            x = torch.round(x * self.levels) / self.levels
        return x


def _pair(inputs: list, output) -> tuple[np.ndarray, np.ndarray]:
    return inputs[0].detach().double().numpy(), np.asarray(output, np.float64).reshape(tuple(inputs[0].shape))


SNAP = 1e-6  # a least-squares fit to float32 data is this close to the constant the port used


def _rounded(value: float) -> float:
    """`value`, or its nearest 1-to-4-significant-digit rounding (or of its inverse) where that is
    within SNAP: a port's constants are round numbers (255, 1/255, 0.229), and a fit's last digits
    are the data's rounding."""
    for candidate in (float(f"{value:.{d}g}") for d in (1, 2, 3, 4)):
        if candidate and abs(candidate - value) <= SNAP * abs(value):
            return candidate
    for candidate in (float(f"{1 / value:.{d}g}") for d in (1, 2, 3, 4)) if value else ():
        if candidate and abs(1 / candidate - value) <= SNAP * abs(value):
            return 1 / candidate
    return value


def _fit_scale(module: Any, inputs: list, output) -> float:
    """The least-squares factor from the model's input to the port's."""
    x, y = _pair(inputs, output)
    return _rounded(float(np.vdot(x, y) / np.vdot(x, x)))


def _fit_normalized(module: Any, inputs: list, output) -> tuple[list[float], list[float]]:
    """Per channel (axis 1), the least-squares y = (x - mean) / std."""
    x, y = _pair(inputs, output)
    means, stds = [], []
    for c in range(x.shape[1]):
        a, b = np.polyfit(x[:, c].ravel(), y[:, c].ravel(), 1)
        stds.append(_rounded(float(1 / a)))
        means.append(_rounded(float(-b / a)))
    return means, stds


def _scale_words(module: Any, value: float) -> str:
    if abs(value - UINT8_LEVELS) <= 0.01 * UINT8_LEVELS:
        return "pixels in [0, 255] where the model takes [0, 1]"
    if abs(value * UINT8_LEVELS - 1) <= 0.01:
        return "pixels in [0, 1] where the model takes [0, 255]"
    return f"the input scaled by {value:.3g}"


def _normalized_words(module: Any, value: tuple) -> str:
    mean, std = (", ".join(f"{v:.3g}" for v in values) for values in value)
    return f"another normalization of the input: (x - mean) / std of the model's x, mean ({mean}), std ({std})"


def _reversed(module: Any, value: Any) -> Any:
    changed = copy.deepcopy(module)
    changed.channels_reversed = True
    return changed


CAUSES: tuple[Cause, ...] = (
    Cause("BGR for RGB", (KIND,), _reversed, lambda m, v: "the channels in the other order (BGR for RGB)"),
    Cause(
        "input scale",
        (KIND,),
        with_attribute("scale"),
        _scale_words,
        parameter="scale",
        example=float(UINT8_LEVELS),
        fit=_fit_scale,
    ),
    Cause(
        "uint8 input",
        (KIND,),
        with_attribute("levels"),
        lambda m, v: "the input quantised to uint8 (256 levels over [0, 1])",
        parameter="levels",
        example=UINT8_LEVELS,
        fit=lambda m, inputs, output: UINT8_LEVELS,
    ),
    Cause(
        "input mean/std",
        (KIND,),
        with_attribute("normalized"),
        _normalized_words,
        parameter="mean, std",
        example=([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),  # ImageNet's, applied twice
        fit=_fit_normalized,
    ),
)
