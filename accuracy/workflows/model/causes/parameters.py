"""Parameter causes: a missing bias; a bias or weight loaded from another layer of the same
shape (a mix-up in a converter's name mapping), which the model around the unit shows."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from accuracy.workflows.model.causes.cause import Cause, Context

BIASED = ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "LayerNorm", "GroupNorm",
          "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Embedding")  # fmt: skip


def _without_bias(module: Any, value: Any) -> Any:
    if getattr(module, "bias", None) is None or not torch.any(module.bias != 0):
        raise ValueError("no bias to miss")
    changed = copy.deepcopy(module)
    with torch.no_grad():
        changed.bias.zero_()
    return changed


def _others(attribute: str):
    """The paths of the model's other modules whose `attribute` has this module's shape and other values."""

    def choices(module: Any, context: Context) -> list[str]:
        own = getattr(module, attribute, None)
        if not isinstance(own, torch.Tensor):
            return []
        return [
            path
            for path, other in context.modules.items()
            if other is not module
            and isinstance(theirs := getattr(other, attribute, None), torch.Tensor)
            and theirs.shape == own.shape
            and not torch.equal(theirs, own)
        ]

    return choices


def _from_other(attribute: str):
    def change(module: Any, path: str, context: Context) -> Any:
        changed = copy.deepcopy(module)
        with torch.no_grad():
            getattr(changed, attribute).copy_(getattr(context.modules[path], attribute))
        return changed

    return change


def _loaded_words(attribute: str) -> Callable[[Any, Any], str]:
    return lambda module, path: f"its {attribute} loaded from {path}"


CAUSES: tuple[Cause, ...] = (
    Cause("missing bias", BIASED, _without_bias, lambda m, v: "its bias missing (zero)"),
    *(
        Cause(
            f"{attribute} from another layer",
            BIASED,
            _from_other(attribute),
            _loaded_words(attribute),
            parameter="layer",
            choices=_others(attribute),
            contextual=True,
        )
        for attribute in ("bias", "weight")
    ),
)
