"""One name, one meaning: no two public classes of gpudoctor/ and probes/ share a name (two
``GpuSampler`` classes, the exporter's view and the training monitor's, read as one thing).

``ALIKE`` lists the names still shared (each to be given one meaning), with the exact files that
share each: a third class of one of these names fails too.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ALIKE = {
}


def _public_classes() -> dict[str, set[str]]:
    where: dict[str, set[str]] = defaultdict(set)
    for path in sorted([*(ROOT / "gpudoctor").rglob("*.py"), *(ROOT / "probes").rglob("*.py")]):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].add(path.relative_to(ROOT).as_posix())
    return where


def test_no_two_public_classes_share_a_name():
    shared = {name: files for name, files in _public_classes().items() if len(files) > 1}
    assert {name: files for name, files in shared.items() if ALIKE.get(name) != files} == {}



def test_model_py_is_the_report_model_only():
    """``model.py`` means the report model (core/model.py); fleet's rows and the MNIST network
    live in fleet/rows.py and workload/network.py."""
    found = sorted(p.relative_to(ROOT).as_posix()
                   for p in [*(ROOT / "gpudoctor").rglob("model.py"), *(ROOT / "probes").rglob("model.py")])
    assert found == ["gpudoctor/core/model.py"]
