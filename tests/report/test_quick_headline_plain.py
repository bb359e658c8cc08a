"""The quick verdict's headline is one bounded line made plain by core._text.plain_text: an escape
in a driver's words is shown marked (``␛``), not dropped without a trace."""

from __future__ import annotations

from gpudoctor.report.quick import HEADLINE_MAX, _one_line


def test_escape_is_marked_not_dropped_and_the_line_stays_one_and_bounded() -> None:
    line = _one_line("GPU 0\n is \x1b[31mhot\x07 " + "x" * 500)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line
    assert "␛[31m" in line and line.startswith("GPU 0 is ")
    assert len(line) <= HEADLINE_MAX and line.endswith("…")
