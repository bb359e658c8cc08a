"""The command layer: one module per ``gpudoctor`` command.

Each command module defines ``register(subparsers)``, which adds its parser and sets
``handler=run``, and ``run(args) -> int`` (an exit code from :mod:`gpudoctor.core.exitcodes`).
A command drives libraries (runner, recorder, exporter, workload, live, tui.app, render)
and never imports another command; what commands share lives here in two modules that
are not commands: :mod:`~gpudoctor.commands.args` (argument types) and
:mod:`~gpudoctor.commands.output` (stdout then files, progress, the report).

A new command: a module here, added to ``COMMAND_NAMES`` (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from gpudoctor.commands.args import Subcommands

# Every command, in the order ``gpudoctor --help`` lists them. A command's module is imported
# only when it is registered: ``gpudoctor report`` loads neither the exporter nor the workload.
COMMAND_NAMES = ("report", "record", "distributed", "exporter", "compare", "fleet", "why", "tui", "watch", "bench")

# Modules of this package that are shared helpers, not commands.
SHARED = ("args", "output")


def load(name: str) -> ModuleType:
    """The module of command ``name`` (one of :data:`COMMAND_NAMES`)."""
    if name not in COMMAND_NAMES:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")


def register_all(subparsers: Subcommands, names: Iterable[str] = COMMAND_NAMES) -> None:
    for name in names:
        load(name).register(subparsers)


__all__ = ["COMMAND_NAMES", "SHARED", "load", "register_all"]
