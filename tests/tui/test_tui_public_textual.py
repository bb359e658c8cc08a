"""gpudoctor uses Textual's public API only: no module imports a private (underscore) Textual
module or name, which a Textual release may change or remove without notice (the key footer
once subclassed ``textual.widgets._footer.FooterKey``).

One import is allowed, on purpose: the quiet input thread of gpudoctor.tui.driver feeds Textual's
own ``XTermParser`` (there is no public one); it checks the parser's shape first and leaves
Textual's input thread unchanged when the import or the check fails (tests/tui/test_tui_driver.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: (module file, imported name): the imports of private Textual code allowed, each with its reason above.
ALLOWED = {("gpudoctor/tui/driver.py", "textual._xterm_parser.XTermParser")}


def _private(dotted: str) -> bool:
    return dotted.split(".")[0] == "textual" and any(part.startswith("_") for part in dotted.split("."))


def private_textual_imports(source: str) -> list[str]:
    """The private Textual modules and names ``source`` imports (``module.name`` for a from-import)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _private(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [f"{node.module}.{alias.name}" for alias in node.names
                      if _private(f"{node.module}.{alias.name}")]
    return found


def test_the_check_sees_private_imports():
    assert private_textual_imports("from textual.widgets._footer import FooterKey") == [
        "textual.widgets._footer.FooterKey"]
    assert private_textual_imports("import textual._xterm_parser") == ["textual._xterm_parser"]
    assert private_textual_imports("def f():\n    from textual.app import _private_name") == [
        "textual.app._private_name"]
    assert private_textual_imports("from textual.widgets import Footer\nimport textual") == []


def test_no_gpudoctor_module_imports_private_textual_code():
    files = sorted([*ROOT.joinpath("gpudoctor").rglob("*.py"), *ROOT.joinpath("probes").rglob("*.py")])
    assert any(f.name == "screens.py" for f in files)
    found = {(str(f.relative_to(ROOT)), name) for f in files
             for name in private_textual_imports(f.read_text(encoding="utf-8"))}
    assert found - ALLOWED == set(), f"private Textual imports (use the public API): {sorted(found - ALLOWED)}"


def test_the_key_footer_keeps_help_and_quit_whole_and_a_click_presses_a_key():
    """The own key footer (no private Textual widget): each key whole, help and quit kept on a
    narrow screen, and a click on a key does what the key does."""
    from support.tui_support import make_test_app, run_async, screen_lines, take_samples, wait_for

    @run_async
    async def run() -> tuple[str, str, str]:
        app = make_test_app()
        async with app.run_test(size=(60, 20)) as pilot:
            await take_samples(pilot, app, 1)
            narrow = screen_lines(app)[-1].rstrip()
            footer = app.screen.query_one("KeysFooter")
            await pilot.resize_terminal(120, 30)
            await wait_for(pilot, lambda: "w workload" in screen_lines(app)[-1])
            wide = screen_lines(app)[-1].rstrip()
            start = wide.index(" p processes")
            await pilot.click(footer, offset=(start + 2, 0))
            await wait_for(pilot, lambda: app.screen.TITLE == "Processes")
            title = app.screen.TITLE
            await pilot.press("q")
        return narrow, wide, title

    narrow, wide, title = run()
    assert narrow.endswith("? help  q quit") and len(narrow) <= 60, narrow
    assert "w workload" not in narrow and "w wor" not in narrow  # left out whole
    assert wide.startswith(" v view  o overview  p processes  d doctor  w workload"), wide
    assert title == "Processes"
