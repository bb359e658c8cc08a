"""One Finding type: every judgement's type is ``core.model.Finding`` itself, and no other class in
gpudoctor/ or probes/ carries a finding's fields (code, summary, why, fix), so a finding-like class
cannot come back beside it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpudoctor.backends import busy
from gpudoctor.core.model import Finding
from gpudoctor.hooks import summary
from gpudoctor.why import analysis, hang
from probes import _gpu

ROOT = Path(__file__).resolve().parents[2]
FINDING_FIELDS = {"code", "summary", "why", "fix"}
HOME = ROOT / "gpudoctor" / "core" / "model.py"


@pytest.mark.parametrize("alias", [busy.Verdict, analysis.Decision, hang.Hang, summary.DiagnosisItem, _gpu.NoDevice])
def test_each_judgement_type_is_finding_itself(alias: type) -> None:
    assert alias is Finding


def _fields(node: ast.ClassDef) -> set[str]:
    names = {t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    for item in node.body:  # fields set in __init__ count too
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            names |= {a.attr for a in ast.walk(item) if isinstance(a, ast.Attribute)
                      and isinstance(a.value, ast.Name) and a.value.id == "self"}
    return names


def _finding_like(source: str) -> list[str]:
    return [node.name for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ClassDef) and FINDING_FIELDS <= _fields(node)]


def test_no_other_class_has_a_findings_fields() -> None:
    files = sorted((ROOT / "gpudoctor").rglob("*.py")) + sorted((ROOT / "probes").rglob("*.py"))
    bad = [f"{f.relative_to(ROOT)}: {name}" for f in files if f != HOME
           for name in _finding_like(f.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


def test_the_guard_sees_a_finding_like_class() -> None:
    assert _finding_like("class Verdict:\n    code: str\n    summary: str\n    why: str\n    fix: str\n")
    assert _finding_like("class V:\n    def __init__(self):\n        self.code = self.summary = self.why = self.fix = ''\n")
    assert _finding_like((HOME).read_text(encoding="utf-8")) == ["Finding"]
