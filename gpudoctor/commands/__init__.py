"""The command layer: one module per ``gpudoctor`` command.

Each command module defines ``register(subparsers)``, which adds its parser and sets
``handler=run``, and ``run(args) -> int`` (an exit code from :mod:`gpudoctor.exitcodes`).
A command drives libraries (runner, recorder, exporter, workload, live, tui.app, render)
and never imports another command; what commands share lives here in two modules that
are not commands: :mod:`~gpudoctor.commands.args` (argument types) and
:mod:`~gpudoctor.commands.output` (stdout then files, progress, the report).

A new command: a module here, added to ``COMMANDS`` (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from gpudoctor.commands import bench, compare, distributed, exporter, fleet, record, report, tui, watch

# In the order ``gpudoctor --help`` lists them.
COMMANDS = (report, record, distributed, exporter, compare, fleet, tui, watch, bench)

# Modules of this package that are shared helpers, not commands.
SHARED = ("args", "output")


def register_all(subparsers: Any) -> None:
    for command in COMMANDS:
        command.register(subparsers)


__all__ = ["COMMANDS", "SHARED", "register_all"]
