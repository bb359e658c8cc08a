"""Layering contracts (shared/design.md) and the packaged layout."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.fresh_interpreter import modules_loaded

ROOT = Path(__file__).resolve().parents[2]

# Front ends: they render results or stream samples, never touch hardware libraries.
FRONT_END_GLOBS = ["gpudoctor/cli.py", "gpudoctor/console/render.py", "gpudoctor/tui/**/*.py",
                   "gpudoctor/exporter*.py", "gpudoctor/exporter/**/*.py",
                   "gpudoctor/commands/**/*.py"]
HARDWARE_MODULES = {"torch", "pynvml"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _front_end_files() -> list[Path]:
    files: set[Path] = set()
    for pattern in FRONT_END_GLOBS:
        files |= set(ROOT.glob(pattern))
    return sorted(files)


def test_front_ends_never_import_torch_or_pynvml():
    files = _front_end_files()
    assert ROOT / "gpudoctor/cli.py" in files
    offenders = {str(p.relative_to(ROOT)): sorted(_imports(p) & HARDWARE_MODULES) for p in files}
    assert not {k: v for k, v in offenders.items() if v}


def test_hooks_import_torch_only_inside_functions():
    # The hooks instrument the user's training loop, so they use torch; but only once a step
    # runs, so that `import gpudoctor` (and the front ends above) never load it.
    for path in (ROOT / "gpudoctor/hooks").glob("*.py"):
        top = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                top |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top.add(node.module.split(".")[0])
        assert not top & HARDWARE_MODULES, path.name
    assert modules_loaded("import gpudoctor.hooks", ("torch",)) == []  # no torch.* without torch


def test_model_imports_only_the_standard_library():
    heavy = _imports(ROOT / "gpudoctor/core/model.py") & {"torch", "pynvml", "textual", "rich", "psutil", "numpy"}
    assert not heavy


def test_only_backends_import_pynvml():
    for path in list((ROOT / "gpudoctor").rglob("*.py")) + list((ROOT / "probes").rglob("*.py")):
        if "pynvml" in _imports(path):
            assert path.parent.name == "backends", path


def test_probe_modules_do_not_import_torch_at_module_level():
    for path in (ROOT / "probes").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                top |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                top.add(node.module.split(".")[0])
        assert "torch" not in top, f"{path.name} imports torch at module level (breaks --quick)"


def test_report_path_never_imports_textual_or_torch():
    code = ("import sys, io, contextlib\n"
            "import gpudoctor, gpudoctor.cli, gpudoctor.console.render, gpudoctor.report.runner\n"
            "from gpudoctor.probes import registry\n"
            "registry()\n"
            "from gpudoctor.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['report', '--quick'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch', 'torchvision')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_public_surface_is_pinned():
    import gpudoctor

    for name in gpudoctor.__all__:
        assert getattr(gpudoctor, name) is not None, name
    assert {"Report", "ProbeResult", "Status", "Finding", "Measurement", "__version__"} <= set(gpudoctor.__all__)


@pytest.mark.slow
def test_wheel_contains_probes_as_gpudoctor_probes(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("gpudoctor-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("environment", "devices", "health", "__init__"):
        assert f"gpudoctor/probes/{module}.py" in names
    assert not any(n.startswith("probes/") for n in names)
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "gpudoctor = gpudoctor.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()
