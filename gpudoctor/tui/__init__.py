"""The Textual TUI (``gpudoctor`` with no arguments, ``gpudoctor tui``).

Importing this package does not import textual: ``gpudoctor.tui.workload_runner`` stays
light (the command is ``gpudoctor.commands.tui``); the app itself lives
in :mod:`gpudoctor.tui.app` and is loaded on first use of ``GpudoctorApp``/``make_app``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"GpudoctorApp": "gpudoctor.tui.app", "make_app": "gpudoctor.tui.app"}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpudoctor.tui' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
