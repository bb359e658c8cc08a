"""tests/ mirrors the packages: each test file lives in the folder named for the package its
subject lives in (gpudoctor/<package>/, probes/, the CLI) or in project/ (whole-project checks),
and the shared fakes and helpers live in one package, tests/support/.

A helper module left beside the tests, a folder named for no package, or a test file at tests/'s
top fails here; the check is run on a planted tree too, so it is known to see them.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Folders of tests/ that hold no test files of their own package: shared data and the helpers.
NOT_PACKAGES = {"data", "support", "__pycache__"}
#: Data folders inside a test folder (files a test reads, not modules).
DATA_FOLDERS = {"snapshots", "why_scripts", "__pycache__"}


def _package_names(root: Path) -> set[str]:
    packages = {p.name for p in (root / "gpudoctor").iterdir() if (p / "__init__.py").is_file()}
    return packages | {"probes", "cli", "project"}


def misplaced(root: Path) -> list[str]:
    """What in ``root``/tests breaks the layout, one line each."""
    tests, wrong = root / "tests", []
    packages = _package_names(root)
    if not (tests / "support" / "__init__.py").is_file():
        wrong.append("tests/support is not a package")
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if rel.parts[0] in ("data", "support") or DATA_FOLDERS & set(rel.parts[1:-1]):
            continue
        if rel.parts == ("conftest.py",):
            continue
        if len(rel.parts) != 2:
            wrong.append(f"tests/{rel}: test files live one folder deep, tests/<package>/test_*.py")
        elif not path.name.startswith("test_"):
            wrong.append(f"tests/{rel}: a helper beside the tests; shared helpers go in tests/support/")
        elif rel.parts[0] not in packages:
            wrong.append(f"tests/{rel}: {rel.parts[0]!r} names no package of gpudoctor/ (nor probes, cli, project)")
    for folder in sorted(p for p in tests.iterdir() if p.is_dir()):
        if folder.name not in NOT_PACKAGES and folder.name not in packages:
            wrong.append(f"tests/{folder.name}/: names no package")
    return wrong


def test_tests_mirror_the_packages_with_one_support_package():
    assert misplaced(ROOT) == []
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir()} - NOT_PACKAGES
    assert len(folders) >= 10  # the tree was read


def test_the_check_sees_a_stray_helper_a_top_level_test_and_a_folder_of_no_package(tmp_path):
    (tmp_path / "gpudoctor" / "core").mkdir(parents=True)
    (tmp_path / "gpudoctor" / "core" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for name in ("support/__init__.py", "core/test_model.py", "core/fake_thing.py", "test_top.py",
                 "gadgets/test_gadget.py", "data/make.py", "tui/snapshots/x.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("")
    found = misplaced(tmp_path)
    assert any("core/fake_thing.py: a helper beside the tests" in w for w in found)
    assert any("test_top.py: test files live one folder deep" in w for w in found)
    assert any("gadgets/test_gadget.py" in w for w in found) and any(w == "tests/gadgets/: names no package"
                                                                     for w in found)
    assert not any("core/test_model.py" in w or "data/" in w or "snapshots" in w for w in found), found
