"""Two code-health figures of gpudoctor/ and probes/, read from the source's AST (nothing is imported).

1. Parameters typed ``Any``: of every function parameter (``self`` and ``cls`` of methods left
   out; ``*args`` and ``**kwargs`` counted), how many are annotated exactly ``Any`` (the target is
   at most 5%). Unannotated parameters and annotations that merely contain Any
   (``dict[str, Any]``) are counted beside it.
2. Functions longer than 60 lines (the target is none): from the ``def`` line (decorators left
   out) to the function's last line, nested functions counted on their own as well.

    python benchmarks/code_metrics.py            # the figures and the long functions
    python benchmarks/code_metrics.py --json     # the same as one JSON object
    python benchmarks/code_metrics.py --any-list # also every parameter typed Any, by file
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpudoctor", "probes")
LONG_LINES = 60
ANY_TARGET_PCT = 5.0


@dataclass
class Figures:
    parameters: int = 0
    typed_any: int = 0
    containing_any: int = 0
    unannotated: int = 0
    functions: int = 0
    any_params: list[str] = field(default_factory=list)
    long_functions: list[tuple[int, str]] = field(default_factory=list)  # (lines, "path:line qualname")


def _annotation(node: ast.expr | None) -> ast.expr | None:
    """The annotation as an expression; a quoted one is parsed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return node


def _is_any(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Any") or (
        isinstance(node, ast.Attribute) and node.attr == "Any"
        and isinstance(node.value, ast.Name) and node.value.id in {"typing", "t"})


def _contains_any(node: ast.expr) -> bool:
    return any(isinstance(n, (ast.Name, ast.Attribute)) and _is_any(n) for n in ast.walk(node))


class _Visitor(ast.NodeVisitor):
    def __init__(self, figures: Figures, path: str) -> None:
        self.figures, self.path = figures, path
        self.scope: list[str] = []
        self.in_class: list[bool] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.in_class.append(True)
        self.generic_visit(node)
        self.in_class.pop()
        self.scope.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        f = self.figures
        f.functions += 1
        name = ".".join([*self.scope, node.name])
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > LONG_LINES:
            f.long_functions.append((lines, f"{self.path}:{node.lineno} {name}"))
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        method = bool(self.in_class and self.in_class[-1])
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        if method and not static and positional and positional[0].arg in {"self", "cls", "mcs"}:
            positional = positional[1:]
        every = [*positional, *args.kwonlyargs, *([args.vararg] if args.vararg else []),
                 *([args.kwarg] if args.kwarg else [])]
        for arg in every:
            f.parameters += 1
            annotation = _annotation(arg.annotation)
            if annotation is None:
                f.unannotated += 1
            elif _is_any(annotation):
                f.typed_any += 1
                f.any_params.append(f"{self.path}:{arg.lineno} {name}({arg.arg})")
            elif _contains_any(annotation):
                f.containing_any += 1
        self.scope.append(node.name)
        self.in_class.append(False)
        self.generic_visit(node)
        self.in_class.pop()
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function


def measure(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> Figures:
    figures = Figures()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            _Visitor(figures, rel).visit(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
    figures.long_functions.sort(reverse=True)
    return figures


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--any-list", action="store_true", help="list every parameter typed Any")
    args = parser.parse_args(argv)
    f = measure()
    summary = {
        "packages": list(PACKAGES),
        "functions": f.functions,
        "parameters": f.parameters,
        "typed_any": f.typed_any,
        "typed_any_pct": _pct(f.typed_any, f.parameters),
        "typed_any_target_pct": ANY_TARGET_PCT,
        "containing_any": f.containing_any,
        "unannotated": f.unannotated,
        "unannotated_pct": _pct(f.unannotated, f.parameters),
        "long_function_lines": LONG_LINES,
        "long_functions": [{"lines": n, "where": w} for n, w in f.long_functions],
    }
    if args.json:
        if args.any_list:
            summary["any_params"] = f.any_params
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{' and '.join(p + '/' for p in PACKAGES)}: {f.functions} functions, {f.parameters} parameters "
          "(self/cls left out)")
    print(f"  typed Any:        {f.typed_any:5d}  {summary['typed_any_pct']:5.1f}%  (target <= {ANY_TARGET_PCT:g}%)")
    print(f"  containing Any:   {f.containing_any:5d}  {_pct(f.containing_any, f.parameters):5.1f}%  "
          "(dict[str, Any] and the like)")
    print(f"  unannotated:      {f.unannotated:5d}  {summary['unannotated_pct']:5.1f}%")
    print(f"functions over {LONG_LINES} lines: {len(f.long_functions)} (target 0)")
    for lines, where in f.long_functions:
        print(f"  {lines:4d}  {where}")
    if args.any_list:
        print("parameters typed Any:")
        for where in f.any_params:
            print(f"  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
