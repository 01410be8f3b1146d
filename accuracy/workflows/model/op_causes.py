"""Why an op-level output is beyond rounding (#42): `check` and `explain` try the cause catalogue's
entries that apply to the op, as `opbench model` tries them on a flagged layer.

The registry op is the torch module accuracy.catalog.module_ops declares it for, built from the
op's inputs (a Linear with W and b, a LayerNorm with the registry's eps, ...), so every entry of
`causes()` that applies to that module kind is tried, those installed packages add included.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accuracy.catalog.module_ops import MODULE_OPS, ModuleOp
from accuracy.core.dtypes import FloatFormat
from accuracy.judge.verdicts import BEYOND, SUSPICIOUS
from accuracy.workflows.model.causes import explain
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import CauseFinding, Unit, port_inputs

BATCH_NORMS = {3: "BatchNorm1d", 4: "BatchNorm2d", 5: "BatchNorm3d"}  # by the input's rank: (B, C, ...)


def _constructed(kind: str, named: dict[str, np.ndarray], x: np.ndarray):
    """A module of `kind` with the shapes of the op's inputs (its values are set after)."""
    from torch import nn

    from accuracy.catalog.ops.norms import GN_GROUPS

    sizes = {
        "Linear": lambda: (named["W"].shape[1], named["W"].shape[0]),
        "Conv2d": lambda: (named["w"].shape[1], named["w"].shape[0], named["w"].shape[2]),
        "LayerNorm": lambda: (x.shape[-1],),
        "GroupNorm": lambda: (GN_GROUPS, x.shape[1]),
        "Softmax": lambda: (-1,),
    }
    if kind in BATCH_NORMS.values():
        return getattr(nn, kind)(x.shape[1])
    return getattr(nn, kind)(*sizes.get(kind, tuple)())


def op_module(op: str, inputs: dict[str, np.ndarray]) -> tuple[Any, ModuleOp] | None:
    """The torch module that computes registry op `op` on these inputs (its parameters the op's
    other inputs), or None where module_ops declares no module for the op or it does not match."""
    import torch

    entry = next((e for e in MODULE_OPS if e.op == op), None)
    if entry is None or "x" not in inputs:
        return None
    x = inputs["x"]
    kind = BATCH_NORMS.get(x.ndim, "") if entry.modules[0] in BATCH_NORMS.values() else entry.modules[0]
    if kind not in entry.modules:
        return None
    module = _constructed(kind, inputs, x).double().eval()
    for name, wanted in entry.requires.items():
        if not callable(wanted) and name != "training":
            setattr(module, name, wanted)
    with torch.no_grad():
        for name, attribute in entry.params.items():
            getattr(module, attribute).copy_(torch.from_numpy(np.asarray(inputs[name], np.float64)))
    return (module, entry) if entry.matches(module, x) else None


def op_cause(
    op: str, inputs: dict[str, np.ndarray], fmt: FloatFormat, label: str, output: np.ndarray,
    compute: FloatFormat | None = None,
) -> CauseFinding | None:  # fmt: skip
    """The cause that explains an output of `op` that is not within rounding, as `explain` in
    causes/ answers it (or the nearest); None where no module computes the op."""
    import torch

    found = op_module(op, inputs)
    if found is None:
        return None
    module, _ = found
    x = torch.from_numpy(np.asarray(inputs["x"], np.float64))
    unit = Unit([LayerCall(op, op, module, [x], None, [None])])
    return explain(unit, port_inputs([x], fmt), fmt, label, output, compute)


def with_cause(row: dict, op: str, inputs: dict, fmt: FloatFormat, output: np.ndarray, compute=None) -> None:
    """`check`'s or `explain`'s row of an output beyond rounding (or suspicious) gains `cause`, where
    the catalogue has entries for the module that computes the op; a row within rounding never."""
    if row["verdict"] not in (BEYOND, SUSPICIOUS):
        return
    cause = op_cause(op, inputs, fmt, row.get("label") or row.get("impl", ""), output, compute)
    if cause is not None:
        row["cause"] = cause
