"""docs/architecture.md's "Where new things go", held where a test can hold it: a thing added in
its place is found by what uses it, and a thing added anywhere else (or half added) fails here.

- a command: a module of gpudoctor/commands/ is a command named in COMMAND_NAMES, or shared;
- a probe: a module of probes/ not starting with ``_`` is a probe the registry finds;
- a fleet rule: every ``judge_*`` of gpudoctor.fleet.rules is applied to the rows by fleet's gather;
- a why rule: every category of gpudoctor.why.rules is in the rules' docstring table and shown by
  why's text view.

A reading (tests/backends/test_catalogue.py) and a finding code (tests/core/test_wording_tables.py,
tests/core/test_findings_everywhere.py) have their own tests.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _called_names(module: object) -> set[str]:
    """Every name called as ``x.name(...)`` or ``name(...)`` in a module's source."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_every_module_of_commands_is_a_registered_command_or_shared():
    from gpudoctor import commands

    modules = {p.stem for p in (ROOT / "gpudoctor" / "commands").glob("*.py")} - {"__init__"}
    assert modules == set(commands.COMMAND_NAMES) | set(commands.SHARED), (
        "a module in gpudoctor/commands/ that is neither a command in COMMAND_NAMES nor shared")


def test_every_public_module_of_probes_is_a_probe_the_registry_finds():
    from gpudoctor.probes import registry

    modules = {p.stem for p in (ROOT / "probes").glob("*.py") if not p.stem.startswith("_")}
    found = set(registry())
    assert modules <= found, f"{sorted(modules - found)}: no PROBE the registry finds (helpers start with _)"


def test_every_fleet_rule_is_applied_by_gather():
    """A ``judge_*`` written in fleet.rules and never applied would judge nothing."""
    from gpudoctor.fleet import gather, idle, rules

    judges = {name for name, f in vars(rules).items()
              if name.startswith("judge_") and inspect.isfunction(f) and f.__module__ == rules.__name__}
    assert len(judges) >= 5  # the module was read
    applied = _called_names(gather) | _called_names(rules) | _called_names(idle)
    assert judges <= applied, f"{sorted(judges - applied)}: fleet rules that no code applies"
    # and the ones applied by gather itself are the entry points, in gather's one pass
    assert {"judge_gpudoctor", "judge_dcgm", "judge_busy", "judge_targets"} <= _called_names(gather)


def test_every_why_category_is_in_the_rules_table_and_shown():
    from gpudoctor.why import rules, text

    rulers = (rules.__doc__ or "").split("\n=")
    assert len(rulers) >= 4, "the rules' docstring lost its table"
    listed = set(re.findall(r"^([a-z_]+)\s", rulers[2].split("\n", 1)[1], re.M))  # the rows, below the header
    assert set(rules.CATEGORIES) <= listed, (
        f"{sorted(set(rules.CATEGORIES) - listed)}: categories the rules' docstring table does not describe")
    shown = set(text._SHOWN)
    assert shown == set(rules.CATEGORIES), (
        f"why's text view shows {sorted(shown ^ set(rules.CATEGORIES))} differently from the rules' categories")
