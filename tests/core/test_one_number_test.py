"""One test of "is this a number?": ``gpudoctor.core._num``.

A module that writes ``isinstance(x, (int, float)) and not isinstance(x, bool)`` again, or a
``_num``/``_number`` helper that only renames ``number()``, grows a twin that drifts (one
forgets bools, one NaN, one text). This walks the source of gpudoctor/ and probes/ and names each.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpudoctor.core._num import exact_number, is_number, number

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "gpudoctor" / "core" / "_num.py"
WRAPPER_NAMES = {"_num", "_number", "_is_number", "_is_num", "_as_number", "_numeric"}


def _sources() -> list[Path]:
    files = sorted((ROOT / "gpudoctor").rglob("*.py")) + sorted((ROOT / "probes").rglob("*.py"))
    return [f for f in files if f != HOME]


def _isinstance_of(node: ast.AST) -> tuple[str, set[str]] | None:
    """(the tested expression, the type names) of an ``isinstance(x, T)`` call, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and len(node.args) == 2):
        return None
    kinds = node.args[1]
    names = [kinds] if isinstance(kinds, ast.Name) else list(kinds.elts) if isinstance(kinds, ast.Tuple) else []
    return ast.unparse(node.args[0]), {n.id for n in names if isinstance(n, ast.Name)}


def _number_tests(tree: ast.AST) -> list[int]:
    """Lines of a hand-written is-number test: one ``and``/``or`` holding ``isinstance(x, (int, float))``
    and ``isinstance(x, bool)`` on the same ``x``."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.BoolOp):
            continue
        seen: dict[str, set[str]] = {}
        for part in node.values:
            inner = part.operand if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not) else part
            found = _isinstance_of(inner)
            if found:
                seen.setdefault(found[0], set()).update(found[1])
        if any({"int", "float", "bool"} <= kinds for kinds in seen.values()):
            lines.append(node.lineno)
    return lines


def _wrappers(tree: ast.AST) -> list[int]:
    """Lines of a helper named like a number test, or one whose whole body returns ``number(...)``
    or ``is_number(...)`` (a rename of the one test)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        renames = (len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call)
                   and isinstance(body[0].value.func, ast.Name)
                   and body[0].value.func.id in {"number", "is_number", "exact_number"})
        if node.name in WRAPPER_NAMES or renames:
            lines.append(node.lineno)
    return lines


def _offences(source: str) -> list[str]:
    tree = ast.parse(source)
    return ([f"{line}: is-number test written by hand (use core._num.is_number)" for line in _number_tests(tree)]
            + [f"{line}: a wrapper of core._num (call number/is_number)" for line in _wrappers(tree)])


def test_no_module_rewrites_the_number_test() -> None:
    bad = [f"{path.relative_to(ROOT)}:{offence}" for path in _sources()
           for offence in _offences(path.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source", [
    "ok = isinstance(x, (int, float)) and not isinstance(x, bool)",
    "bad = isinstance(v, bool) or not isinstance(v, (int, float))",
    "y = a and isinstance(d['k'], (float, int)) and not isinstance(d['k'], bool) and math.isfinite(d['k'])",
    "def _num(value):\n    return number(value, finite=True)\n",
    "def _count(value):\n    '''A count.'''\n    return number(value)\n",
])
def test_the_guard_sees_each_way_of_writing_a_twin(source: str) -> None:
    assert _offences(source)


def test_the_guard_leaves_other_tests_alone() -> None:
    assert not _offences("a = isinstance(x, int) and not isinstance(x, bool)\n"
                         "b = isinstance(x, (int, float)) and isinstance(y, bool)\n"
                         "def _seconds(v):\n    return float(v) if is_number(v) and v < 1e6 else None\n")


def test_parse_reads_what_a_driver_answers_as_text_and_keeps_counters_whole() -> None:
    assert exact_number(7) == 7 and isinstance(exact_number(7), int)
    assert exact_number("12.5", parse=True) == 12.5 and exact_number(b"3", parse=True) == 3.0
    assert exact_number("12.5") is None and exact_number("n/a", parse=True) is None
    assert exact_number(True, parse=True) is None and exact_number(None, parse=True) is None
    assert exact_number(object(), parse=True) is None
    assert number("inf", parse=True, finite=True) is None and number("2", parse=True) == 2.0
    assert is_number(2.0) and not is_number(True)
