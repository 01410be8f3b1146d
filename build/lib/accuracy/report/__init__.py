"""Trend reports over asv results: load them into pandas, find steps, compare, render."""

from __future__ import annotations

import importlib

# imported on first use (PEP 562): the CLI imports submodules for their defaults, and pandas and
# matplotlib cost seconds that `opbench --help` must not pay
_EXPORTS = {
    "LoadedResults": "accuracy.report.load",
    "compare_across": "accuracy.report.environments",
    "find_steps": "accuracy.report.trends",
    "load_results": "accuracy.report.load",
    "write_report": "accuracy.report.render",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
