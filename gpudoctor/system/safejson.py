"""Read a JSON file that someone else wrote, within bounds.

``json.load`` trusts its input: a link to ``/dev/zero`` is read until memory runs out,
100,000 nested brackets end in ``RecursionError``, and a file of empty objects costs far
more memory than its size. :func:`read_json_file` reads at most ``max_bytes + 1`` bytes
(it never trusts ``stat``: FIFOs, ``/dev/zero`` and growing files are bounded the same
way), then scans the brackets outside strings to bound the nesting depth and the number
of objects and arrays *before* the decoder recurses, and only then decodes.

Every failure is a :class:`JsonFileError` with a one-line message.

Numbers are read so that nothing downstream can overflow: an integer of up to
:data:`MAX_INT_DIGITS` digits stays an integer; a longer one (``int()`` of 5,000 digits raises,
and 400 digits overflow ``float()``) and a float literal beyond the float range (``1e400``) are
read as infinity, which is not a finite number: with ``allow_nan=False`` the document is refused
("a number out of range"), otherwise the caller turns it into NA with a reason, as it does NaN.

The other way, :func:`json_safe` is the one walker that turns what the project holds (NaN,
``NA`` readings, dataclasses, numpy and torch scalars) into values JSON can carry.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from typing import Any

from gpudoctor.system import fileio
from gpudoctor.core._num import is_number
from gpudoctor.core.errors import first_line

MiB = 1 << 20

# Escapes are removed first, so that a string is then simply a quote, no quote, a quote:
# two linear passes, where one pattern with escapes inside can backtrack quadratically.
_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}

#: Integers with more digits than this are read as infinity (uint64's maximum has 20).
MAX_INT_DIGITS = 20


class JsonFileError(ValueError):
    """A file that could not be read as bounded JSON (message: one line, no path)."""


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """At most ``max_bytes`` bytes of ``path``; :class:`JsonFileError` if there are more, or if it
    is not a regular file. It is opened without blocking and checked by descriptor before a byte is
    read: a FIFO with no writer, a terminal or /dev/zero named as a report, recording or summary
    would otherwise hang the reader or feed it for ever."""
    try:
        return fileio.read_regular(path, max_bytes)
    except FileNotFoundError:
        raise JsonFileError("no such file") from None
    except fileio.TooLargeError:
        raise JsonFileError(f"larger than the limit of {_size(max_bytes)}") from None
    except (IsADirectoryError, fileio.NotRegularFileError) as exc:
        raise JsonFileError(exc.strerror) from None
    except OSError as exc:
        raise JsonFileError(f"cannot read: {exc.strerror or exc}") from None


def _size(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n} bytes"


def nesting(text: str) -> tuple[int, int]:
    """(deepest nesting, number of objects and arrays) of the JSON ``text``.

    Counts brackets outside strings. On valid JSON this is exact; on invalid JSON it is
    exact up to the first error, which is as far as a decoder gets before it stops.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    if not brackets:
        return 0, 0
    opened = brackets.count("[") + brackets.count("{")
    depth = max(itertools.accumulate(_STEP[c] for c in brackets))
    return max(depth, 0), opened


def _no_constant(name: str) -> Any:
    raise JsonFileError(f"not JSON ({name} is not a JSON number)")


def _int_or_inf(text: str) -> int | float:
    digits = len(text) - (text[0] == "-")
    if digits <= MAX_INT_DIGITS:
        return int(text)
    return -math.inf if text[0] == "-" else math.inf


def _finite_only(name: str) -> float:
    raise JsonFileError(f"a number out of range ({name[:24]}{'...' if len(name) > 24 else ''})")


def _float_finite(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _finite_only(text)


def _int_finite(text: str) -> int | float:
    value = _int_or_inf(text)
    return value if isinstance(value, int) else _finite_only(text)


def parse_bounded(data: bytes | str, *, max_depth: int, max_containers: int, allow_nan: bool = True) -> Any:
    """Decode ``data`` (UTF-8 JSON) within the depth and container bounds.

    ``allow_nan``: NaN, Infinity and numbers beyond the float range are read as non-finite
    floats (for the caller to turn into NA); without it they are refused.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(f"not UTF-8 text (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    depth, containers = nesting(text)
    if depth > max_depth:
        raise JsonFileError(f"nested more than {max_depth} levels deep")
    if containers > max_containers:
        raise JsonFileError(f"more than {max_containers:,} objects and arrays")
    try:
        if allow_nan:
            return json.loads(text, parse_int=_int_or_inf)
        return json.loads(text, parse_constant=_no_constant, parse_int=_int_finite, parse_float=_float_finite)
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # a hook's refusal, or anything else the decoder raises on bad input
        if isinstance(exc, JsonFileError):
            raise
        raise JsonFileError(f"not JSON ({first_line(exc)})") from None
    except RecursionError:  # cannot happen within max_depth; kept so nothing escapes as a traceback
        raise JsonFileError("nested too deeply") from None


def read_json_file(path: str | os.PathLike[str], *, max_bytes: int, max_depth: int = 64,
                   max_containers: int = 1_000_000, allow_nan: bool = True) -> Any:
    """The JSON value in ``path``, read within the given bounds."""
    return parse_bounded(read_bounded(path, max_bytes), max_depth=max_depth,
                         max_containers=max_containers, allow_nan=allow_nan)


def json_safe(obj: object, max_depth: int = 64, _depth: int = 0) -> Any:
    """A copy of ``obj`` that ``json.dumps(..., allow_nan=False)`` accepts.

    JSON has no NaN or Infinity and no "not available": a float that is not finite and an
    ``NA`` reading become null. Mappings get text keys; tuples and sets become lists; an
    object with ``to_dict()``, a dataclass, or a numpy/torch scalar (``.item()``) becomes
    its value; anything else its text. Deeper than ``max_depth``, an object becomes its repr.
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if _depth > max_depth:
        return repr(obj)
    if type(obj).__name__ == "NA" and hasattr(obj, "reason"):  # backends.na.NA (a lower layer cannot be imported here)
        return None
    deeper = _depth + 1
    if isinstance(obj, dict):
        return {str(k): json_safe(v, max_depth, deeper) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v, max_depth, deeper) for v in obj]
    for method in ("to_dict", "item"):  # a result object; a numpy / torch scalar
        convert = getattr(obj, method, None)
        if callable(convert):
            try:
                return json_safe(convert(), max_depth, deeper)
            except Exception:
                pass
    import dataclasses  # here, not with the module: dataclasses imports inspect (report --quick's start)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return json_safe(dataclasses.asdict(obj), max_depth, deeper)
    return str(obj)


def non_finite(value: object) -> bool:
    """Whether ``value`` is a number JSON cannot carry: NaN, an infinity (or an integer too
    large for a float, which :func:`parse_bounded` reads as one)."""
    if not is_number(value):
        return False
    if isinstance(value, int):
        return value.bit_length() > 1023
    return not math.isfinite(value)


__all__ = ["JsonFileError", "read_bounded", "parse_bounded", "non_finite", "MAX_INT_DIGITS", "read_json_file", "nesting", "json_safe"]
