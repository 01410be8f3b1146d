"""The one JSON policy of every `--json`: strict JSON that any parser reads.

JSON has no NaN or infinity (Python's `json` writes `NaN` and `Infinity`, which strict parsers
reject). A non-finite number becomes `null`, and the key that held it gets a sibling
`<key>_reason` saying which it was, "nan", "inf" or "-inf", so a reader can tell a ratio that
does not apply (NaN) from an error too large to count (inf) without any field changing its name or
type. In a list the reasons go to `<key>_reason` as a list beside it, null where a value was
finite. numpy scalars become Python numbers and tuples lists, as `json` would write them. A typed
row (a frozen dataclass of the model workflow) is written as its `to_json()`: the one place its
JSON is made, at this edge. `json_restored` reads a saved output back, each null with a reason
the non-finite float it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

REASON_SUFFIX = "_reason"


def json_ready(value: Any) -> Any:
    """`value` with every non-finite float as None and its reason beside it (module doc)."""
    return _encoded(value)[0]


def json_restored(value: Any) -> Any:
    """`value` as `json_ready` wrote it, read back: each null with a reason beside it the
    non-finite float it was, the reasons dropped (a saved `--json` report read in again)."""
    if isinstance(value, list):
        return [json_restored(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        stem = key[: -len(REASON_SUFFIX)] if isinstance(key, str) and key.endswith(REASON_SUFFIX) else None
        if stem is not None and stem in value and (value[stem] is None or isinstance(value[stem], list)):
            continue  # why the value beside it is null
        reason = value.get(f"{key}{REASON_SUFFIX}")
        if isinstance(reason, str) and item is None:
            out[key] = float(reason)
        elif isinstance(reason, list) and isinstance(item, list):
            out[key] = [json_restored(v) if r is None else float(r) for v, r in zip(item, reason, strict=True)]
        else:
            out[key] = json_restored(item)
    return out


def dumps(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text of `value`; `allow_nan=False` makes a missed non-finite number a bug, not output."""
    return json.dumps(json_ready(value), indent=indent, allow_nan=False)


def _encoded(value: Any) -> tuple[Any, str | list[str | None] | None]:
    """(the value as JSON holds it, why it is null: a reason, a list of reasons, or None)."""
    if isinstance(value, np.generic):
        value = value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "to_json"):
        value = value.to_json()
    if isinstance(value, float) and not math.isfinite(value):
        return None, "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return _encoded_dict(value), None
    if isinstance(value, (list, tuple)):
        pairs = [_encoded(v) for v in value]
        reasons = [reason if isinstance(reason, str) else None for _, reason in pairs]
        return [v for v, _ in pairs], reasons if any(reasons) else None
    return value, None


def _encoded_dict(mapping: dict[Any, Any]) -> dict[Any, Any]:
    out = {}
    for key, value in mapping.items():
        out[key], reason = _encoded(value)
        if reason is not None:
            reason_key = f"{key}{REASON_SUFFIX}"
            if reason_key in mapping:
                raise ValueError(f"JSON output: {reason_key!r} is both a field and the reason for {key!r}")
            out[reason_key] = reason
    return out
