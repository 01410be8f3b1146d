"""Normalization causes: another epsilon (fitted), batch statistics (train mode)."""

from __future__ import annotations

import copy
from typing import Any

from accuracy.workflows.model.causes.cause import Cause, named, with_attribute

NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "LlamaRMSNorm")
# where a value is some framework's default, the words say whose
EPS_DEFAULTS = {1e-3: "Keras' and TensorFlow's default", 1e-5: "torch's default", 1e-6: "Llama's RMSNorm default",
                1e-12: "HF BERT's LayerNorm default"}  # fmt: skip


def _eps_attribute(module: Any) -> str:
    return "eps" if hasattr(module, "eps") else "variance_epsilon"


def _train_mode(module: Any, value: Any) -> Any:
    return copy.deepcopy(module).train()


CAUSES: tuple[Cause, ...] = (
    Cause(
        "normalization eps",
        NORMS,
        with_attribute(_eps_attribute),
        lambda m, v: (
            f"{type(m).__name__} eps = {named(v, EPS_DEFAULTS)}; this model has {getattr(m, _eps_attribute(m)):.2g}"
        ),
        values=lambda m: (1e-12, 1.0),
        parameter="eps",
        example=1e-3,
    ),
    Cause(
        "train mode",
        ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Dropout"),
        _train_mode,
        lambda m, v: "the model in train mode (batch statistics)",
    ),
)
