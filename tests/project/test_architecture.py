"""The layers of docs/architecture.md, held by import-linter's contracts ([tool.importlinter] in
pyproject.toml) over every import of the source, lazy ones too:

    core <- system <- backends <- sampling <- producers (probes, workload, hooks, fleet, why)
         <- report (the runner layer) <- front ends (tui | exporter | console) <- commands <- cli, tools

Each package of gpudoctor/ is one layer, so a module's layer is where it lives: the layers
contract is exhaustive (a new package with no layer fails it). The other contracts: the front
ends are independent of each other, a command never imports another command, front ends,
commands and the CLI never import torch or pynvml, only the TUI imports textual, only the
backends import pynvml, the core imports no third-party package but psutil.

What the contracts cannot see is checked here: probes/ is installed as gpudoctor.probes, a mapping
the import graph cannot follow, so the lower layers' imports of it are read from the source; the
package's root holds only its face; the contracts themselves catch a planted violation.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from support.fresh_interpreter import modules_loaded

ROOT = Path(__file__).resolve().parents[2]
#: gpudoctor/'s root: the package's face, nothing else.
FACE = {"__init__", "__main__", "cli", "_version"}
#: The layers below the producers, which never import the probes.
BELOW_PRODUCERS = ("gpudoctor.core", "gpudoctor.system", "gpudoctor.backends", "gpudoctor.sampling")
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "probes":  # installed as gpudoctor.probes (setup.py maps it)
        parts.insert(0, "gpudoctor")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    files = list((ROOT / "gpudoctor").rglob("*.py")) + list((ROOT / "probes").rglob("*.py"))
    return {_module_name(p): p for p in sorted(files)}


def _imported(path: Path, package: str) -> set[str]:
    """Every module name ``path`` imports, at any depth (relative imports resolved in ``package``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return found


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("importlinter") is None:
        if os.environ.get("CI"):
            pytest.fail("import-linter is missing: the dev extra installs it", pytrace=False)
        pytest.skip("import-linter is not installed (pip install -e '.[dev]' brings it)")
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--config", "pyproject.toml", "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


def test_the_import_contracts_are_kept():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, f"lint-imports exited {done.returncode}:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"
    assert "Contracts: 7 kept, 0 broken." in done.stdout, done.stdout[-3000:]


def test_the_contracts_catch_a_lazy_upward_import_and_a_package_with_no_layer(tmp_path):
    """The contracts read the copied tree, not the installed one: a lazy import of the TUI from the
    core, and a new package that no layer names, each break them."""
    for name in ("gpudoctor", "probes"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    stats = tmp_path / "gpudoctor" / "core" / "stats.py"
    stats.write_text(stats.read_text(encoding="utf-8") + "\n\ndef _planted():\n    from gpudoctor.tui import app\n"
                     "    return app\n", encoding="utf-8")
    (tmp_path / "gpudoctor" / "stray").mkdir()
    (tmp_path / "gpudoctor" / "stray" / "__init__.py").write_text("", encoding="utf-8")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "gpudoctor.core.stats -> gpudoctor.tui.app" in done.stdout, done.stdout[-3000:]
    assert "gpudoctor.stray" in done.stdout, done.stdout[-3000:]


def test_the_root_holds_only_the_face_and_every_folder_is_a_package():
    root = {p.stem for p in (ROOT / "gpudoctor").glob("*.py")}
    assert root == FACE, f"{sorted(root - FACE)}: move into the package of its layer (docs/architecture.md)"
    for folder in (ROOT / "gpudoctor").iterdir():
        if folder.is_dir() and folder.name not in ("__pycache__", "demo") and any(folder.glob("*.py")):
            assert (folder / "__init__.py").is_file(), folder


def test_no_layer_below_the_producers_imports_the_probes():
    """gpudoctor.probes is invisible to the import graph (probes/ is mapped), so it is read here."""
    offenders = []
    for module, path in _modules().items():
        if module.startswith(BELOW_PRODUCERS):
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            hits = sorted(i for i in _imported(path, package) if i == "gpudoctor.probes" or i.startswith("gpudoctor.probes."))
            if hits:
                offenders.append(f"{module} imports {hits}")
    assert not offenders, "\n".join(offenders)
    # the reader itself sees a lazy relative import
    assert "gpudoctor.probes.health" in _imported(_modules()["gpudoctor.report.runner"], "gpudoctor.report") or \
        "gpudoctor.probes" in _imported(_modules()["gpudoctor.report.runner"], "gpudoctor.report")


def test_no_command_imports_another_command():
    """The independence contract lists the commands by hand: it must list every one of them."""
    from gpudoctor import commands

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    command_modules = {commands.load(name).__name__ for name in commands.COMMAND_NAMES}
    shared = {f"gpudoctor.commands.{name}" for name in commands.SHARED}
    assert command_modules and not command_modules & shared
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    independent = next(c for c in contracts if c["id"] == "commands")["modules"]
    assert set(independent) == command_modules
    for name in commands.COMMAND_NAMES:
        command = commands.load(name)
        assert callable(command.register) and callable(command.run), command.__name__


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
