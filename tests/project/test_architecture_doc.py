"""docs/architecture.md's layers table names the modules of each package, and names inside them:
each must exist, so a rename (fleet's ``model`` became ``rows``) cannot leave the table describing
code that is gone."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
#: A package's folder as the table writes it: `gpudoctor/fleet/` or `fleet/` (probes/ is the top-level folder).
FOLDER = re.compile(r"`(?:gpudoctor/)?([a-z]+)/(?:\*)?`")
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


def _table_rows() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("| layer | package (what is in it)")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[2])  # the "package (what is in it)" cell
    return rows


def _package_dir(name: str) -> Path | None:
    folder = ROOT / "probes" if name == "probes" else ROOT / "gpudoctor" / name
    return folder if (folder / "__init__.py").is_file() else None


def _defined(folder: Path) -> set[str]:
    """Every module of the package and every name a module of it defines at its top level or in a class."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        names.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def named_in_table() -> list[tuple[str, str]]:
    """(package, name) for every `name` the table gives after a package's folder, up to the next
    folder (a standard-library module it names aside)."""
    found = []
    for cell in _table_rows():
        marks = list(FOLDER.finditer(cell))
        for mark, following in zip(marks, marks[1:] + [None]):
            if _package_dir(mark.group(1)) is None:
                continue
            segment = cell[mark.end(): following.start() if following else len(cell)]
            found += [(mark.group(1), name) for name in NAME.findall(segment)
                      if name not in sys.stdlib_module_names]  # "without `dataclasses`"
    return found


def test_every_module_and_name_the_layers_table_gives_exists_in_its_package():
    named = named_in_table()
    assert len({package for package, _ in named}) >= 8 and len(named) >= 40, named  # the table was read
    defined = {package: _defined(_package_dir(package)) for package in {package for package, _ in named}}
    missing = [f"{package}/: {name}" for package, name in named if name not in defined[package]]
    assert not missing, f"docs/architecture.md's layers table names what its package does not have: {missing}"


def test_a_stale_name_is_caught(monkeypatch, tmp_path):
    doc = tmp_path / "architecture.md"
    doc.write_text(DOC.read_text(encoding="utf-8").replace("`client`, `rows`, `rules`", "`client`, `model`, `rules`"),
                   encoding="utf-8")
    monkeypatch.setitem(globals(), "DOC", doc)
    named = named_in_table()
    assert ("fleet", "model") in named and "model" not in _defined(_package_dir("fleet"))
    try:
        test_every_module_and_name_the_layers_table_gives_exists_in_its_package()
    except AssertionError as caught:
        assert "fleet/: model" in str(caught)
    else:
        raise AssertionError("the stale name passed")
