"""The lint gate: ruff and mypy with the project's configuration (pyproject.toml).

CI runs only pytest, so the linters run here, as subprocesses from the repository root: ruff over
gpudoctor/ probes/ tests/ benchmarks/ with [tool.ruff], mypy with [tool.mypy] over every package of
gpudoctor/ and probes/ as they are installed (probes/ as gpudoctor.probes; `python -m
gpudoctor.tools.typecheck` builds that tree; one strictness, tests/project/test_typed_seams.py holds that). A finding fails the test with
the tool's own output; a tool that is not installed (it comes with the `dev` extra) skips it.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF_PATHS = ["gpudoctor", "probes", "tests", "benchmarks"]


def _skip_without(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]' brings it)")


def _run_tool(module: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    _skip_without(module)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, check=False)


def _fail_on_findings(tool: str, done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        pytest.fail(f"{tool} exited {done.returncode}:\n{done.stdout}{done.stderr}", pytrace=False)


def test_ruff_finds_nothing():
    # --no-cache: no .ruff_cache in the tree; the check of the whole tree takes well under a second
    done = _run_tool("ruff", ["check", "--no-cache", "--output-format", "concise", *RUFF_PATHS])
    _fail_on_findings("ruff check", done)


def _source_files() -> int:
    return sum(1 for folder in ("gpudoctor", "probes") for path in (ROOT / folder).rglob("*.py")
               if "__pycache__" not in path.parts)


def test_mypy_finds_nothing():
    # gpudoctor.tools.typecheck runs mypy with [tool.mypy] on the tree as it is installed (probes/
    # as gpudoctor/probes, built in a temporary folder), so every module is checked once under its
    # installed name; no incremental cache is written, so the run never depends on an earlier one
    _skip_without("mypy")
    done = subprocess.run([sys.executable, "-m", "gpudoctor.tools.typecheck"], cwd=ROOT, capture_output=True,
                          text=True, timeout=240, check=False)
    _fail_on_findings("mypy (python -m gpudoctor.tools.typecheck)", done)
    checked = re.search(r"no issues found in (\d+) source files", done.stdout)
    assert checked and int(checked.group(1)) == _source_files(), done.stdout  # not a file left out


# Wrong calls planted in copies, each at the end of its file: from the runner and from the
# distributed command into the probes, and inside a probe through its relative import.
PLANTED = {
    "gpudoctor/report/runner.py": "\n\ndef _planted() -> None:\n    from gpudoctor.probes import registry\n\n"
                                  "    registry(level=3)\n",
    "gpudoctor/commands/distributed.py": "\n\ndef _planted() -> None:\n"
                                         "    from gpudoctor.probes.distributed import parse_size\n\n"
                                         "    parse_size(64)\n",
    "gpudoctor/probes/_planted.py": "from . import registry\n\nregistry(level=3)\n",
}


def _plant(tree: Path) -> dict[str, int]:
    """Replace the planted files' folders in the tree by copies, append the wrong calls; return
    the line of each wrong call."""
    import shutil

    lines = {}
    for path, text in PLANTED.items():
        folder = tree / Path(path).parent
        if folder.is_symlink():
            source = folder.resolve()
            folder.unlink()
            shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
        target = tree / path
        old = target.read_text(encoding="utf-8") if target.exists() else ""
        target.write_text(old + text, encoding="utf-8")
        lines[path] = len((old + text).splitlines())
    return lines


def test_mypy_checks_the_calls_into_the_probes(tmp_path):
    """The runner's and the distributed command's calls into gpudoctor.probes are type-checked
    (the probes are not an untyped Any to them), and a probe's own relative import too; a finding
    in a probe names its source file, probes/..., not the temporary tree's path."""
    _skip_without("mypy")
    from gpudoctor.tools import typecheck

    tree = typecheck.build_tree(tmp_path)
    assert {p.name for p in tree.iterdir()} >= {"__init__.py", "report", "probes"}
    lines = _plant(tmp_path)
    done = typecheck.run_mypy(tmp_path, list(PLANTED))
    assert done.returncode == 1, done.stdout + done.stderr
    seen = done.stdout
    source = {path: path.replace("gpudoctor/probes/", "probes/") for path in PLANTED}
    for path, line in lines.items():
        assert re.search(rf"(?m)^{re.escape(source[path])}:{line}: error: Argument .*\[arg-type\]$", seen), seen
    assert f"Found {len(PLANTED)} errors in {len(PLANTED)} files" in seen, seen
    assert str(tmp_path) not in seen and "gpudoctor/probes/" not in seen, seen


def test_typecheck_names_source_paths(tmp_path):
    from gpudoctor.tools import typecheck

    assert typecheck.to_installed(str(ROOT / "probes" / "health.py")) == "gpudoctor/probes/health.py"
    assert typecheck.to_installed(str(ROOT / "probes")) == "gpudoctor/probes"
    assert typecheck.to_installed(str(ROOT / "gpudoctor" / "cli.py")) == "gpudoctor/cli.py"
    assert typecheck.to_installed(str(ROOT / "tests")) is None
    assert typecheck.to_installed(str(ROOT / "probes_extra.py")) is None
    out = (f"gpudoctor/probes/x.py:3: error: e\n{tmp_path}/gpudoctor/probes/y.py:4: note: n\n"
           f"gpudoctor/cli.py:5: error: e\n{tmp_path}/gpudoctor/core/z.py: note: n\n")
    assert typecheck.to_source(out, tmp_path) == (
        f"probes/x.py:3: error: e\n{ROOT}/probes/y.py:4: note: n\n"
        f"gpudoctor/cli.py:5: error: e\n{ROOT}/gpudoctor/core/z.py: note: n\n")


def test_typecheck_refuses_a_path_outside_the_packages(capsys):
    _skip_without("mypy")
    from gpudoctor.core import exitcodes
    from gpudoctor.tools import typecheck

    assert typecheck.main([str(ROOT / "tests" / "project" / "test_lint.py")]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give paths under gpudoctor/ or probes/" in err


def test_code_health_targets_hold():
    """Issue 24's figures, kept: no function in gpudoctor/ or probes/ over 60 lines, and at most 5%
    of parameters typed Any (benchmarks/code_metrics.py reads the source's AST; nothing is imported)."""
    import json

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "code_metrics.py"), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert figures["functions"] > 1000 and figures["parameters"] > 1000  # the whole tree was read
    assert figures["long_functions"] == [], f"split these by meaning: {figures['long_functions']}"
    assert figures["typed_any_pct"] <= figures["typed_any_target_pct"], figures["typed_any_pct"]


def test_typecheck_says_in_one_line_when_mypy_cannot_finish(monkeypatch, capsys):
    _skip_without("mypy")
    from gpudoctor.core import exitcodes
    from gpudoctor.system._proc import ChildTimeout
    from gpudoctor.tools import typecheck

    def runaway(*args, **kwargs):
        raise ChildTimeout("did not finish within 240 s")

    monkeypatch.setattr(typecheck, "run_mypy", runaway)
    assert typecheck.main([]) == exitcodes.INTERNAL
    err = capsys.readouterr().err
    assert err == "gpudoctor.tools.typecheck: mypy did not finish within 240 s\n", err


def test_typecheck_says_in_one_line_when_the_checkout_holds_gpudoctor_probes(tmp_path, capsys):
    _skip_without("mypy")
    from gpudoctor.core import exitcodes
    from gpudoctor.tools import typecheck

    (tmp_path / "gpudoctor" / "probes").mkdir(parents=True)
    (tmp_path / "probes").mkdir()
    assert typecheck.main([], root=tmp_path) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert err.startswith("gpudoctor.tools.typecheck: ") and err.count("\n") == 1, err
