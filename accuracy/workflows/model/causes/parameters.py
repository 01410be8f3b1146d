"""Parameter causes: a missing bias; a bias or weight loaded from another layer of the same
shape (a mix-up in a converter's name mapping), which the model around the unit shows.

The weight and bias are wherever the module's kind keeps them (`kinds.held`): a user's Linear
holding `w` and `b` has them too."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from accuracy.workflows.model.causes.cause import Cause, Context
from accuracy.workflows.model.kinds import held

BIASED = ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "LayerNorm", "GroupNorm",
          "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Embedding")  # fmt: skip


def _part(module: Any, part: str) -> Any:
    """The module's weight or bias (`part`), by the name its kind keeps it under; ValueError: none."""
    found = held(module, part)
    if not isinstance(found, torch.Tensor):
        raise ValueError(f"no {part}")
    return found


def _without_bias(module: Any, value: Any) -> Any:
    if not torch.any(_part(module, "bias") != 0):
        raise ValueError("no bias to miss")
    changed = copy.deepcopy(module)
    with torch.no_grad():
        _part(changed, "bias").zero_()
    return changed


def _others(attribute: str):
    """The paths of the model's other modules whose `attribute` has this module's shape and other values."""

    def choices(module: Any, context: Context) -> list[str]:
        own = held(module, attribute)
        if not isinstance(own, torch.Tensor):
            return []
        return [
            path
            for path, other in context.modules.items()
            if other is not module
            and isinstance(theirs := held(other, attribute), torch.Tensor)
            and theirs.shape == own.shape
            and not torch.equal(theirs, own)
        ]

    return choices


def _from_other(attribute: str):
    def change(module: Any, path: str, context: Context) -> Any:
        changed = copy.deepcopy(module)
        with torch.no_grad():
            _part(changed, attribute).copy_(_part(context.modules[path], attribute))
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
