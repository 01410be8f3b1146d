"""A user's MODULE:FUNCTION, imported as `python -m` would from the current directory: the one
way `check --fn`, `opbench model`'s factories and the Keras port's builders load user code."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from accuracy.core.errors import OpbenchError


def load_function(spec: str, what: str = "--fn") -> Callable[..., Any]:
    """MODULE:FUNCTION, importable from the current directory as `python -m` would; `what`
    names the argument in errors."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise OpbenchError(f"{what} {spec!r}: expected MODULE:FUNCTION, e.g. mylayers:block")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # the module sees a command line of its own name only: one that parses sys.argv at import
    # (argparse) read opbench's arguments, printed "usage: opbench [-h] [--lr LR]" and exited
    argv, sys.argv = sys.argv, [module_name]
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:  # user code must not end opbench silently, with its exit status
        raise OpbenchError(f"{what} {spec!r}: importing {module_name} called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise OpbenchError(f"{what} {spec!r}: cannot import {module_name}: {exc}") from None
    finally:
        sys.argv = argv
    fn = getattr(module, name, None)
    if not callable(fn):
        raise OpbenchError(f"{what} {spec!r}: {module_name} has no function {name!r}")
    return fn
