"""The lint gate: ruff and mypy with the project's configuration (pyproject.toml).

CI runs only pytest, so the linters run here, as subprocesses from the repository root: ruff over
gpudoctor/ probes/ tests/ benchmarks/ with [tool.ruff], mypy over what [tool.mypy] names (every
package of gpudoctor/ and probes/, one strictness; tests/project/test_typed_seams.py holds that). A finding fails the test with
the tool's own output; a tool that is not installed (it comes with the `dev` extra) skips it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF_PATHS = ["gpudoctor", "probes", "tests", "benchmarks"]


def _run_tool(module: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]' brings it)")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, check=False)


def _fail_on_findings(tool: str, done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        pytest.fail(f"{tool} exited {done.returncode}:\n{done.stdout}{done.stderr}", pytrace=False)


def test_ruff_finds_nothing():
    # --no-cache: no .ruff_cache in the tree; the check of the whole tree takes well under a second
    done = _run_tool("ruff", ["check", "--no-cache", "--output-format", "concise", *RUFF_PATHS])
    _fail_on_findings("ruff check", done)


def test_mypy_finds_nothing():
    # the files and the per-module strictness come from [tool.mypy]; no incremental cache is
    # written, so the run never depends on (or leaves behind) an earlier one
    done = _run_tool("mypy", ["--config-file", "pyproject.toml", "--no-incremental", "--cache-dir", "/dev/null"])
    _fail_on_findings("mypy", done)


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
