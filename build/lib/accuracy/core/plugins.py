"""Records that installed packages contribute through entry points (`opbench.ops`,
`opbench.backends`): each entry point names a module exporting a list, or the list itself."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TypeVar

from accuracy.core.errors import warn

T = TypeVar("T")


def load_plugins(group: str, attribute: str, kind: type[T]) -> list[T]:
    """Every `kind` instance the packages declare under `group`. A broken plugin is reported on
    stderr and left out, so one bad package cannot take the catalog down."""
    found = []
    for ep in entry_points(group=group):
        try:
            loaded = ep.load()
            records = list(getattr(loaded, attribute, loaded))
            if not all(isinstance(r, kind) for r in records):
                raise TypeError(f"expected a list of {kind.__name__}")
        except Exception as exc:
            warn(f"plugin {ep.name!r} ({ep.value}) of {group} left out: {exc}")
            continue
        found += records
    return found
