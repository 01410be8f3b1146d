"""Precision causes: weights stored in a lower-precision format."""

from __future__ import annotations

import copy
from typing import Any

from accuracy.workflows.model.causes.cause import Cause
from accuracy.workflows.model.causes.normalization import NORMS

WEIGHTED = ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding", *NORMS)


def _stored_in(dtype_name: str):
    def change(module: Any, value: Any) -> Any:
        import torch

        changed = copy.deepcopy(module)
        with torch.no_grad():
            weight = getattr(changed, "weight", None)
            if weight is None:
                raise ValueError("no weight")
            weight.copy_(weight.to(getattr(torch, dtype_name)).to(weight.dtype))
        return changed

    return change


def _stored_words(dtype_name: str):
    return lambda module, value: f"its weights stored in {dtype_name}"


CAUSES: tuple[Cause, ...] = tuple(
    Cause(f"weights in {name}", WEIGHTED, _stored_in(name), _stored_words(name)) for name in ("bfloat16", "float16")
)
