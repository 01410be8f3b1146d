"""Simulating a machine without a package or a command, for tests of what opbench does then."""

from __future__ import annotations

import importlib.util
import shutil


def hide(monkeypatch, modules=(), commands=()) -> None:
    """`modules` look uninstalled to importlib.util.find_spec, `commands` absent to shutil.which."""
    real_find_spec, real_which = importlib.util.find_spec, shutil.which
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m in modules else real_find_spec(m, *a))
    monkeypatch.setattr(shutil, "which", lambda c, *a: None if c in commands else real_which(c, *a))
