"""Load a script that is not an importable module (benchmarks/*.py, tests/data/make_handmade.py)
by its path, so a test can call its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: str | Path, name: str) -> ModuleType:
    """The module in ``path`` (relative to the repository root, or absolute), run under ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
