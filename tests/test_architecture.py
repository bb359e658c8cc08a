"""The layer rules of docs/architecture.md, checked on the source (every import, lazy ones too).

    foundation <- backends <- sampling <- producers (probes, workload, hooks, recorder, fleet)
               <- runner <- front ends (render, tui, exporter) <- commands <- cli

A module may import gpudoctor modules of its own layer or a lower one, never a higher one.
On top of that: a command never imports another command; front ends never import each
other (render and presentation are shared by all of them); front ends, commands and the
CLI never import torch or pynvml; only the TUI imports textual; only backends import pynvml.

A module that is in no layer fails :func:`test_every_module_has_a_layer`: add it to
``LAYERS`` here and to the table in docs/architecture.md. A name listed here must name a module
that exists (:func:`test_every_layer_name_is_a_module`): a module that goes leaves the list.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
from functools import cache
from pathlib import Path

import pytest
from fresh_interpreter import modules_loaded

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. Patterns are module names (fnmatch); the first layer that matches wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("gpudoctor", "gpudoctor._[!_]*", "gpudoctor.core.model", "gpudoctor.core.errors", "gpudoctor.core.exitcodes",
                    "gpudoctor.system.fileio", "gpudoctor.system.safejson", "gpudoctor.core.anonymize", "gpudoctor.system.signals",
                    "gpudoctor.core.stats", "gpudoctor.core.xid", "gpudoctor.core.kernel_log", "gpudoctor.report.baseline", "gpudoctor.core.findings")),
    ("backends", ("gpudoctor.backends", "gpudoctor.backends.*")),
    ("sampling", ("gpudoctor.sampling.sampler", "gpudoctor.sampling.presentation")),
    ("producers", ("gpudoctor.probes", "gpudoctor.probes.*", "gpudoctor.workload", "gpudoctor.workload.*",
                   "gpudoctor.hooks", "gpudoctor.hooks.*", "gpudoctor.sampling.recorder", "gpudoctor.fleet", "gpudoctor.fleet.*",
                   "gpudoctor.why", "gpudoctor.why.*", "gpudoctor.tools.regenerate")),
    ("runner", ("gpudoctor.report.runner", "gpudoctor.report.quick")),
    ("front ends", ("gpudoctor.console.render", "gpudoctor.tui", "gpudoctor.tui.*", "gpudoctor.exporter", "gpudoctor.exporter.*")),
    ("commands", ("gpudoctor.commands", "gpudoctor.commands.*")),
    ("cli", ("gpudoctor.cli", "gpudoctor.__main__")),
]
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}
FRONT_END_LAYERS = {"front ends", "commands", "cli"}
SHARED_FRONT_END = ("gpudoctor.console.render", "gpudoctor.sampling.presentation")
HARDWARE = {"torch", "pynvml"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "probes":  # installed as gpudoctor.probes (pyproject maps it)
        parts.insert(0, "gpudoctor")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    files = list((ROOT / "gpudoctor").rglob("*.py")) + list((ROOT / "probes").rglob("*.py"))
    return {_module_name(p): p for p in sorted(files)}


def _layer(module: str) -> str | None:
    for name, patterns in LAYERS:
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            return name
    return None


@cache
def _imports(module: str) -> tuple[frozenset[str], frozenset[str]]:
    """(gpudoctor modules, other top-level packages) imported anywhere in ``module``."""
    path = _modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    ours: set[str] = set()
    others: set[str] = set()

    def add(name: str) -> None:
        (ours if name.split(".")[0] == "gpudoctor" else others).add(name if name.startswith("gpudoctor")
                                                                      else name.split(".")[0])

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "gpudoctor":
                add(target)
                continue
            # `from gpudoctor import runner` imports the module gpudoctor.report.runner.
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                add(sub if sub in _modules() else target)
    ours.discard(module)
    return frozenset(ours), frozenset(others)


def _owner(imported: str) -> str:
    """The module an import names, or the closest package that exists."""
    name = imported
    while name not in _modules() and "." in name:
        name = name.rpartition(".")[0]
    return name


def test_every_module_has_a_layer():
    missing = [m for m in _modules() if _layer(m) is None]
    assert not missing, (f"{missing}: in no layer; add each to LAYERS in tests/test_architecture.py and to "
                         "docs/architecture.md")


def test_every_layer_name_is_a_module():
    """Each name in LAYERS matches at least one module of the tree (a pattern, at least one)."""
    modules = _modules()
    stale = [(layer, name) for layer, names in LAYERS for name in names
             if not any(fnmatch.fnmatchcase(m, name) for m in modules)]
    assert not stale, f"{stale}: LAYERS names modules that do not exist; remove them here and in docs/architecture.md"


def test_the_rules_see_the_code():
    """The checker itself: it finds lazy imports and `from gpudoctor import x` modules."""
    cli, _ = _imports("gpudoctor.cli")
    assert "gpudoctor.commands" in cli and "gpudoctor.core.exitcodes" in cli
    report, _ = _imports("gpudoctor.commands.report")
    assert "gpudoctor.report.runner" in report  # imported inside run()
    assert _layer("gpudoctor.commands.report") == "commands" and _layer("gpudoctor.probes.health") == "producers"


def test_no_module_imports_a_higher_layer():
    upward = []
    for module in _modules():
        layer = _layer(module)
        if layer is None:
            continue
        for imported in _imports(module)[0]:
            target = _layer(_owner(imported))
            if target is not None and RANK[target] > RANK[layer]:
                upward.append(f"{module} ({layer}) imports {imported} ({target})")
    assert not upward, "\n".join(upward)


def test_no_command_imports_another_command():
    from gpudoctor import commands

    command_modules = {commands.load(name).__name__ for name in commands.COMMAND_NAMES}
    shared = {f"gpudoctor.commands.{name}" for name in commands.SHARED}
    assert command_modules and not command_modules & shared
    for module in _modules():
        if _layer(module) != "commands" or module == "gpudoctor.commands":
            continue
        others = {_owner(i) for i in _imports(module)[0] if _layer(_owner(i)) == "commands"} - shared - {module}
        assert not others, f"{module} imports the command(s) {sorted(others)}; share code through commands.args/output"
    for name in commands.COMMAND_NAMES:
        command = commands.load(name)
        assert callable(command.register) and callable(command.run), command.__name__


def test_front_ends_do_not_import_each_other():
    """tui, exporter and render are separate front ends; render and presentation are shared."""
    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2])

    crossing = []
    for module in _modules():
        if _layer(module) != "front ends":
            continue
        for imported in _imports(module)[0]:
            owner = _owner(imported)
            if _layer(owner) == "front ends" and package(owner) != package(module) and owner not in SHARED_FRONT_END:
                crossing.append(f"{module} imports {owner}")
    assert not crossing, "\n".join(crossing)


def test_front_ends_commands_and_cli_never_import_torch_or_pynvml():
    offenders = {m: sorted(_imports(m)[1] & HARDWARE) for m in _modules() if _layer(m) in FRONT_END_LAYERS}
    assert not {m: found for m, found in offenders.items() if found}


def test_only_the_tui_imports_textual_and_only_backends_import_pynvml():
    for module in _modules():
        others = _imports(module)[1]
        if "textual" in others:
            assert module.startswith("gpudoctor.tui."), module
        if "pynvml" in others:
            assert module.startswith("gpudoctor.backends."), module


def test_the_command_line_imports_no_command_library_until_it_runs():
    """Building the parser registers every command without importing textual, torch, pynvml,
    prometheus_client, the TUI app or the runner."""
    assert modules_loaded("import gpudoctor.cli as c; c.build_parser()",
                          ("textual", "torch", "pynvml", "prometheus_client", "gpudoctor.tui.app",
                           "gpudoctor.report.runner")) == []


# --------------------------------------------------------------------------- public surfaces
PUBLIC = {
    "gpudoctor": ["__version__", "SCHEMA_VERSION", "Status", "Measurement", "Finding", "ProbeResult", "Report",
                  "GpudoctorError", "UsageError", "DeviceSelectionError", "GpudoctorApp", "SweepConfig",
                  "run_sweep", "TrainingMonitor", "Summary", "DiagnosisItem", "check_devices",
                  "DeviceMismatchError"],
    "gpudoctor.backends": ["NA", "is_na", "value_or", "NvmlBackend", "NvmlGate", "ReplayBackend", "RecordingError",
                           "load_recording", "open_gpu_backend", "normalise_bus_id", "throttle_reason_names",
                           "throttle_reason_words", "GpuBackend", "MemoryReading", "UtilizationReading",
                           "ProcessReading"],
    "gpudoctor.hooks": ["TrainingMonitor", "Summary", "DiagnosisItem", "CODES", "check_devices",
                        "explain_device_error", "DeviceMismatchError", "MonitorUsageError", "MonitorUsageWarning"],
    "gpudoctor.workload": ["MODES", "RunConfig", "SweepConfig", "SweepResult", "run_sweep",
                           "sweep_with_progress"],
    "gpudoctor.tui": ["GpudoctorApp", "make_app"],
    "gpudoctor.probes": ["Probe", "ProbeContext", "registry", "probe_names", "CATALOGUE", "LEVELS"],
    "gpudoctor.commands": ["COMMAND_NAMES", "SHARED", "load", "register_all"],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_surface_is_pinned_exactly(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    assert len(module.__all__) == len(set(module.__all__)), "a name listed twice"


READINGS = {"sample", "fast_sample", "utilization", "memory", "processes", "read", "sample_once"}
PACING = {"sleep", "wait"}


def _sampling_loops(tree: ast.AST) -> list[int]:
    """Lines of loops that read a GPU backend and pace themselves (sleep / Event.wait)."""
    found = []
    for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.While, ast.For))):
        calls = {c.func.attr for c in ast.walk(loop) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)}
        if calls & READINGS and calls & PACING:
            found.append(loop.lineno)
    return found


def test_exactly_one_class_samples_gpus_over_time():
    """gpudoctor.sampling.sampler.Sampler is the only loop that reads GPUs over time; the TUI, watch,
    the exporter, the recorder, the hooks, the workload runs and the probes use it."""
    loops = {}
    for module, path in _modules().items():
        lines = _sampling_loops(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            loops[module] = lines
    assert set(loops) == {"gpudoctor.sampling.sampler"}, loops
    tree = ast.parse(_modules()["gpudoctor.sampling.sampler"].read_text(encoding="utf-8"))
    owners = {cls.name for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
              if _sampling_loops(cls) or any(isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "Thread"
                                             for c in ast.walk(cls))}
    assert owners == {"Sampler"}
