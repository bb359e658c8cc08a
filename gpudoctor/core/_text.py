"""Text that gpudoctor did not write, made safe to show: the one sanitiser.

GPU and driver names, process command lines, NA reasons, anything read from a file, a
recording, Prometheus or another process is data. :func:`plain_text` turns it into one
bounded line in which terminal escape sequences, control characters (C0, DEL, C1) and bidi
overrides are replaced by visible marks, so it can neither move the cursor, retitle the
terminal nor reorder what is around it. The backends apply it where a recording is read;
the front ends apply it again where they print (:mod:`gpudoctor.sampling.presentation` re-exports it).

Standard library only: every layer may use it.
"""

from __future__ import annotations

import re
from typing import Any

#: Longest foreign string shown on one line (a GPU name is < 100, a command line can be huge).
MAX_TEXT = 300

# Terminal escape sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), DCS/SOS/PM/APC
# strings (ESC P/X/^/_ ... ST), and any other ESC + one character. Each becomes one visible mark.
_ESCAPE_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b.?"
    r"|\x9b[0-?]*[ -/]*[@-~]?",
    re.DOTALL,
)
# Characters that move the cursor, ring, erase or reorder text; C1 controls; bidi overrides.
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _control_mark(ch: str) -> str:
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)  # the Unicode control pictures: ␀ ... ␟ (␊ for a newline)
    if code == 0x7F:
        return "\u2421"  # ␡
    return "\ufffd"


def plain_text(value: object, *, limit: int = MAX_TEXT) -> str:
    """Foreign text made safe to print: one line, no control characters, at most ``limit``.

    Escape sequences become ``␛`` followed by their visible parameters (``␛[2J``), other
    control characters their Unicode control pictures (a newline ``␤``-style ``␊``, a tab a
    space). Markup stays literal text: callers print the result as ``rich.text.Text`` (or
    escape it for markdown), so ``[/]`` or ``[@click=app.quit]`` is shown, never parsed.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit * 4:  # bound the work on absurd input before any regex runs
        text = text[: limit * 4]
    text = _SURROGATE_RE.sub("\ufffd", text.replace("\t", " "))  # a lone surrogate cannot be printed
    text = _ESCAPE_RE.sub(lambda m: "\u241b" + _CONTROL_RE.sub(lambda c: _control_mark(c.group()), m.group()[1:]),
                          text)
    text = _CONTROL_RE.sub(lambda m: _control_mark(m.group()), text)
    if len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return text


def plain_strings(value: object, limit: int) -> Any:
    """``value`` (decoded JSON) with every string in it, keys too, made plain by :func:`plain_text`
    within ``limit`` characters; everything else as it was."""
    if isinstance(value, str):
        return plain_text(value, limit=limit)
    if isinstance(value, dict):
        return {(plain_text(k, limit=limit) if isinstance(k, str) else k): plain_strings(v, limit)
                for k, v in value.items()}
    if isinstance(value, list):
        return [plain_strings(v, limit) for v in value]
    return value


__all__ = ["MAX_TEXT", "plain_text", "plain_strings"]
