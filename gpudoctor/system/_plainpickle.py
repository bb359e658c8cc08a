"""A strict, bounded decoder for pickles of plain data (the NCCL flight recorder's dumps).

``pickle.Unpickler`` with every global refused still trusts the rest of its input: an opcode
that stores to memo slot 2**26 makes CPython allocate the whole memo table (1 GiB from 10
bytes), and a dict of integer keys that all hash alike costs quadratic time to build. This
decoder is a small pickle machine of its own that accepts only the opcodes and shapes that
plain data needs and torch's dumps use (torch 2.14 writes PROTO, EMPTY_DICT, MARK,
BINUNICODE, BINPUT, BINGET, SETITEMS, BININT*, EMPTY_LIST, APPENDS, TUPLE2, LONG1, NONE,
NEWTRUE/NEWFALSE, STOP; Python's own pickler adds FRAME, MEMOIZE and the short forms):

- no globals, no object building (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, INST, OBJ,
  persistent ids, extensions): refused, so nothing from the file is ever called;
- the memo is a dict of at most :data:`MAX_MEMO` entries with indices below it: an index is
  a key, never a table size;
- dict keys are strings, bytes, booleans, None or integers of at most 32 bits (whose hashes
  cannot be made to collide: str and bytes hashes are seeded per process, small integers hash
  to themselves), so building a dict stays linear;
- containers nest at most :data:`MAX_DEPTH` deep, and a container that is already inside
  another cannot be changed (which also rules out cycles);
- integers have at most :data:`MAX_LONG_BYTES` bytes, and the whole input at most the bytes
  the caller read (each opcode costs O(1), or O(items) for the ones that take a mark);
- at most :data:`MAX_CONTAINERS` containers and :data:`MAX_VALUES` values in all are made: a
  byte or two of input makes an object of 60-250 bytes, so without a count a 64 MiB file of
  empty dicts would ask for some 16 GiB; with it, 251 MiB (64 MiB of 2-byte strings: 676 MiB), and a dump of
  2,000 entries with 30 frames each (the buffer size the advice sets) stays well within.

Anything else is :class:`PlainPickleError` with a one-line reason. Standard library only.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NoReturn

MAX_MEMO = 1 << 20
MAX_DEPTH = 64
MAX_LONG_BYTES = 256  # LONG1 holds at most 255; a larger integer is no field of a dump
MAX_MARKS = MAX_DEPTH
MAX_CONTAINERS = 1 << 20  # dicts, lists and tuples made (a dump entry makes some 40)
MAX_VALUES = 1 << 23      # values pushed in all: scalars, containers and memo fetches
_KEY_INT_BOUND = 1 << 31


class PlainPickleError(ValueError):
    """A pickle this decoder does not accept (one line)."""


_REFUSED = {
    b"c": "GLOBAL", b"\x93": "STACK_GLOBAL", b"R": "REDUCE", b"b": "BUILD", b"\x81": "NEWOBJ",
    b"\x92": "NEWOBJ_EX", b"i": "INST", b"o": "OBJ", b"P": "PERSID", b"Q": "BINPERSID",
    b"\x82": "EXT1", b"\x83": "EXT2", b"\x84": "EXT4", b"\x8f": "EMPTY_SET", b"\x90": "ADDITEMS",
    b"\x91": "FROZENSET", b"\x97": "NEXT_BUFFER", b"\x98": "READONLY_BUFFER",
}


class _Mark:
    __slots__ = ()


_MARK = _Mark()


class _Machine:
    """The decoder's state: the input, the stack, the memo, and what each container is."""

    def __init__(self, data: bytes) -> None:
        self.raw = bytes(data)
        self.data = memoryview(self.raw)
        self.pos = 0
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self.depth: dict[int, int] = {}    # id(container) -> its nesting depth
        self.sealed: set[int] = set()      # ids of containers already inside another
        self.keep: list[Any] = []          # keeps every container alive, so that ids stay unique
        self.values = 0                    # values pushed so far (at most MAX_VALUES)

    # ---------------------------------------------------------------- input
    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise PlainPickleError("not a whole pickle (truncated: it ends before its STOP)")
        chunk = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return chunk

    def line(self, limit: int = 128) -> bytes:
        end = self.raw.find(b"\n", self.pos, self.pos + limit) - self.pos  # no copy of the window
        if end < 0:
            raise PlainPickleError(f"a text argument longer than {limit} bytes or without its newline")
        return self.take(end + 1)[:-1]

    def unsigned(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    # ---------------------------------------------------------------- containers
    def count(self) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise PlainPickleError(f"more than {MAX_VALUES} values: not the shape of a dump")

    def new(self, container: Any) -> Any:
        if len(self.keep) >= MAX_CONTAINERS:
            raise PlainPickleError(f"more than {MAX_CONTAINERS} dicts, lists and tuples: not the shape of a dump")
        self.keep.append(container)
        self.depth[id(container)] = 1
        return container

    def adopt(self, parent: Any, items: list[Any]) -> None:
        """``items`` go into ``parent``: each becomes sealed, and ``parent`` deeper."""
        if id(parent) in self.sealed:
            raise PlainPickleError("a container changed after it was put inside another (a cycle or an edit): "
                                   "not the shape of a dump")
        deepest = self.depth.get(id(parent), 1)
        for item in items:
            if item is parent:
                raise PlainPickleError("a container inside itself: not the shape of a dump")
            inner = self.depth.get(id(item))
            if inner is not None:
                self.sealed.add(id(item))
                deepest = max(deepest, inner + 1)
        if deepest > MAX_DEPTH:
            raise PlainPickleError(f"nested more than {MAX_DEPTH} deep: not the shape of a dump")
        self.depth[id(parent)] = deepest

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise PlainPickleError("not a whole pickle (an item list without its MARK)")
        start = self.marks.pop()
        items = self.stack[start + 1:]  # the MARK itself is at ``start``
        del self.stack[start:]
        if any(item is _MARK for item in items):
            raise PlainPickleError("not a whole pickle (a stray MARK)")
        return items

    def pop(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise PlainPickleError("not a whole pickle (an opcode with nothing to take)")
        return self.stack.pop()

    def top(self, kind: type) -> Any:
        if not self.stack or not isinstance(self.stack[-1], kind):
            raise PlainPickleError(f"not a whole pickle (expected a {kind.__name__} to fill)")
        return self.stack[-1]

    def tuple_of(self, items: list[Any]) -> tuple[Any, ...]:
        made = self.new(tuple(items))
        self.adopt(made, items)
        return made


def _key(key: object) -> object:
    if isinstance(key, (str, bytes, bool)) or key is None:
        return key
    if isinstance(key, int) and -_KEY_INT_BOUND <= key < _KEY_INT_BOUND:
        return key
    raise PlainPickleError(f"a dict key of type {type(key).__name__} (or an integer over 32 bits): "
                           "not the shape of a dump")


def _set_items(m: _Machine, items: list[Any]) -> None:
    if len(items) % 2:
        raise PlainPickleError("not a whole pickle (a dict item without its value)")
    target = m.top(dict)
    m.adopt(target, items)
    for i in range(0, len(items), 2):
        target[_key(items[i])] = items[i + 1]


def _append(m: _Machine, items: list[Any]) -> None:
    target = m.top(list)
    m.adopt(target, items)
    target.extend(items)


def _memo_index(m: _Machine, index: int) -> int:
    if not 0 <= index < MAX_MEMO:
        raise PlainPickleError(f"memo index {index} is out of range (at most {MAX_MEMO}): not the shape of a dump")
    return index


def _put(m: _Machine, index: int) -> None:
    if not m.stack or m.stack[-1] is _MARK:
        raise PlainPickleError("not a whole pickle (a memo store with nothing to store)")
    if index not in m.memo and len(m.memo) >= MAX_MEMO:
        raise PlainPickleError(f"more than {MAX_MEMO} memo entries: not the shape of a dump")
    m.memo[_memo_index(m, index)] = m.stack[-1]


def _get(m: _Machine, index: int) -> None:
    m.count()
    try:
        m.stack.append(m.memo[_memo_index(m, index)])
    except KeyError:
        raise PlainPickleError(f"memo index {index} was never stored: not a whole pickle") from None


def _long(m: _Machine, size: int) -> int:
    if size > MAX_LONG_BYTES:
        raise PlainPickleError(f"an integer of {size} bytes (at most {MAX_LONG_BYTES}): not the shape of a dump")
    return int.from_bytes(m.take(size), "little", signed=True)


def _text_int(m: _Machine) -> Any:
    raw = m.line().rstrip(b"L")
    if raw in (b"00", b"01"):  # protocol 0's False and True
        return raw == b"01"
    if len(raw) > 40:
        raise PlainPickleError("an integer of more than 40 digits: not the shape of a dump")
    try:
        return int(raw)
    except ValueError:
        raise PlainPickleError("not a whole pickle (an integer that is not one)") from None


def _text(m: _Machine, n: int) -> str:
    try:
        return m.take(n).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise PlainPickleError("not a whole pickle (a string that is not UTF-8)") from None


_Handler = Callable[[_Machine], object]


def _mark(m: _Machine) -> None:
    if len(m.marks) >= MAX_MARKS:
        raise PlainPickleError(f"more than {MAX_MARKS} open MARKs: not the shape of a dump")
    m.marks.append(len(m.stack))
    m.stack.append(_MARK)


def _filled(kind: type, fill: Callable[[_Machine, list[Any]], None]) -> _Handler:
    """DICT and LIST (protocol 0): a new container of the items since the mark."""
    def run(m: _Machine) -> None:
        m.count()
        made = m.new(kind())
        items = m.pop_mark()
        m.stack.append(made)
        fill(m, items)
    return run


def _short_tuple(n: int) -> _Handler:
    def run(m: _Machine) -> None:
        if len(m.stack) < n or any(item is _MARK for item in m.stack[-n:]):
            raise PlainPickleError("not a whole pickle (a tuple of missing items)")
        items = m.stack[-n:]
        del m.stack[-n:]
        m.count()
        m.stack.append(m.tuple_of(items))
    return run


def _set_item(m: _Machine) -> None:
    value, key = m.pop(), m.pop()
    _set_items(m, [key, value])


def _dup(m: _Machine) -> None:
    if not m.stack or m.stack[-1] is _MARK:
        raise PlainPickleError("not a whole pickle (DUP with nothing to copy)")
    m.count()
    m.stack.append(m.stack[-1])


def _push(make: Callable[[_Machine], object]) -> _Handler:
    def run(m: _Machine) -> None:
        m.count()
        m.stack.append(make(m))
    return run


def _global_name(m: _Machine, op: bytes) -> str:
    """The module.name a GLOBAL or STACK_GLOBAL names, for the refusal's words."""
    try:
        if op == b"\x93":
            name, module = m.stack[-1], m.stack[-2]
        else:
            module, name = m.line().decode("ascii", "replace"), m.line().decode("ascii", "replace")
    except (IndexError, PlainPickleError):
        return "?"
    return f"{str(module)[:80]}.{str(name)[:80]}"


_HANDLERS: dict[bytes, _Handler] = {
    b"\x80": lambda m: m.take(1),          # PROTO
    b"\x95": lambda m: m.take(8),          # FRAME: a length hint, nothing to build
    b"(": _mark,
    b"0": lambda m: m.pop(),
    b"1": lambda m: m.pop_mark(),
    b"N": _push(lambda m: None),
    b"\x88": _push(lambda m: True),
    b"\x89": _push(lambda m: False),
    b"J": _push(lambda m: struct.unpack("<i", m.take(4))[0]),
    b"K": _push(lambda m: m.unsigned(1)),
    b"M": _push(lambda m: m.unsigned(2)),
    b"\x8a": _push(lambda m: _long(m, m.unsigned(1))),
    b"\x8b": _push(lambda m: _long(m, m.unsigned(4))),
    b"I": _push(_text_int),
    b"L": _push(_text_int),
    b"G": _push(lambda m: struct.unpack(">d", m.take(8))[0]),
    b"F": _push(lambda m: _text_float(m)),
    b"X": _push(lambda m: _text(m, m.unsigned(4))),
    b"V": _push(lambda m: _text_line(m)),
    b"\x8c": _push(lambda m: _text(m, m.unsigned(1))),
    b"\x8d": _push(lambda m: _text(m, m.unsigned(8))),
    b"B": _push(lambda m: m.take(m.unsigned(4))),
    b"C": _push(lambda m: m.take(m.unsigned(1))),
    b"\x8e": _push(lambda m: m.take(m.unsigned(8))),
    b"}": _push(lambda m: m.new({})),
    b"d": _filled(dict, lambda m, items: _set_items(m, items)),
    b"]": _push(lambda m: m.new([])),
    b"l": _filled(list, lambda m, items: _append(m, items)),
    b")": _push(lambda m: m.new(())),
    b"t": _push(lambda m: m.tuple_of(m.pop_mark())),
    b"\x85": _short_tuple(1),
    b"\x86": _short_tuple(2),
    b"\x87": _short_tuple(3),
    b"s": _set_item,
    b"u": lambda m: _set_items(m, m.pop_mark()),
    b"a": lambda m: _append(m, [m.pop()]),
    b"e": lambda m: _append(m, m.pop_mark()),
    b"p": lambda m: _put(m, _text_index(m)),
    b"q": lambda m: _put(m, m.unsigned(1)),
    b"r": lambda m: _put(m, m.unsigned(4)),
    b"\x94": lambda m: _put(m, len(m.memo)),
    b"g": lambda m: _get(m, _text_index(m)),
    b"h": lambda m: _get(m, m.unsigned(1)),
    b"j": lambda m: _get(m, m.unsigned(4)),
    b"2": _dup,
}


def _refuse(m: _Machine, op: bytes) -> NoReturn:
    if op in (b"c", b"\x93", b"i"):
        raise PlainPickleError(f"refused: it names a global ({_global_name(m, op)}); "
                               "a flight recorder dump holds plain data only")
    name = _REFUSED.get(op)
    if name is not None:
        raise PlainPickleError(f"refused: opcode {name}; a flight recorder dump holds plain data only")
    raise PlainPickleError(f"not a whole pickle (opcode {op!r} is not one this reader accepts)")


def _text_line(m: _Machine) -> str:
    """UNICODE (protocol 0): one line, raw-unicode-escaped."""
    try:
        return m.line(1 << 16).decode("raw-unicode-escape")
    except UnicodeDecodeError:
        raise PlainPickleError("not a whole pickle (a string that is not one)") from None


def _text_float(m: _Machine) -> float:
    try:
        return float(m.line())
    except ValueError:
        raise PlainPickleError("not a whole pickle (a float that is not one)") from None


def _text_index(m: _Machine) -> int:
    raw = m.line()
    if not raw.isdigit() or len(raw) > 10:
        raise PlainPickleError("not a whole pickle (a memo index that is not a number)")
    return int(raw)


def loads(data: bytes) -> Any:
    """The plain data in ``data``; :class:`PlainPickleError` (one line) for anything else.
    Work and memory are linear in ``len(data)``."""
    m = _Machine(data)
    while (op := m.take(1)) != b".":
        handler = _HANDLERS.get(op)
        if handler is None:
            _refuse(m, op)
        handler(m)
    if len(m.stack) != 1 or m.marks:
        raise PlainPickleError("not a whole pickle (its STOP leaves no single value)")
    return m.stack[0]


__all__ = ["loads", "PlainPickleError", "MAX_MEMO", "MAX_DEPTH", "MAX_LONG_BYTES", "MAX_CONTAINERS", "MAX_VALUES"]
