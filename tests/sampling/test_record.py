"""gpudoctor.core._record.record behaves as dataclasses.dataclass for what the quick path's classes use:
the same class written with each gives the same results, errors included."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import field
from typing import ClassVar

import pytest

from gpudoctor.core._record import record


def _pair(frozen: bool, eq: bool = True) -> tuple[type, type]:
    made = []
    for decorate in (dataclasses.dataclass(frozen=frozen, eq=eq), record(frozen=frozen, eq=eq)):
        @decorate
        class Sample:
            name: str
            value: int = 3
            items: list = field(default_factory=list)
            hidden: int = field(default=7, init=False, repr=False, compare=False)

        made.append(Sample)
    return made[0], made[1]


def _outcome(cls, args, kwargs):
    try:
        value = cls(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 (the kind of error is what is compared)
        return type(exc).__name__
    return value


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_repr_eq_and_errors_match_dataclass(frozen):
    reference, ours = _pair(frozen)
    for args, kwargs in [(("a",), {}), (("a", 5), {}), (("a",), {"items": [1]}), ((), {"name": "b", "value": 1}),
                         ((), {}), (("a", 1, [], 9), {}), (("a",), {"name": "b"}), (("a",), {"nope": 1}),
                         (("a",), {"hidden": 1})]:
        theirs = _outcome(reference, args, kwargs)
        mine = _outcome(ours, args, kwargs)
        if isinstance(theirs, str):
            assert mine == theirs, (args, kwargs)
            continue
        assert repr(mine).replace("_pair.<locals>.", "") == repr(theirs).replace("_pair.<locals>.", "")
        assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)
        assert mine.hidden == 7 and mine.items is not ours("x").items  # a new list each time
    assert ours("a", 1) == ours("a", 1) and ours("a", 1) != ours("a", 2)
    assert ours("a") != reference("a")  # another class: not equal, as dataclass says
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(reference)]
    assert dataclasses.replace(ours("a", 1), value=2) == ours("a", 2)


@record(frozen=True)
class Pickled:
    name: str
    values: tuple = ()


def test_a_frozen_record_pickles():
    assert pickle.loads(pickle.dumps(Pickled("a", (1, 2)))) == Pickled("a", (1, 2))


def test_frozen_refuses_changes_and_hashes_like_dataclass():
    reference, ours = _pair(frozen=True)
    one = ours("a", 1, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.value = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del one.name
    assert hash(one) == hash(ours("a", 1, ())) == hash(reference("a", 1, ()))
    assert {one, ours("a", 1, ())} == {one}
    _, unfrozen = _pair(frozen=False)
    assert unfrozen.__hash__ is None and reference.__hash__ is not None  # eq without frozen: unhashable


def test_eq_false_keeps_the_base_class_equality_and_post_init_runs():
    class Base:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    seen = []

    @record(frozen=True, eq=False)
    class Reading(Base):
        value: int

        def __post_init__(self) -> None:
            seen.append(self.value)

    assert Reading(1) == Reading(2) and seen == [1, 2]


def test_dataclasses_functions_work_on_a_record_and_agree_with_its_own():
    """dataclasses.fields/replace/asdict/is_dataclass, which code off the quick path calls on
    records, give what they give on the dataclass; _record.fields/replace (the quick path's) agree."""
    from gpudoctor.core import _record
    for frozen in (False, True):
        reference, ours = _pair(frozen)
        assert dataclasses.is_dataclass(ours) and dataclasses.is_dataclass(ours("a"))
        assert [(f.name, f.init, f.repr, f.compare) for f in dataclasses.fields(ours)] == \
            [(f.name, f.init, f.repr, f.compare) for f in dataclasses.fields(reference)]
        assert [f.name for f in _record.fields(ours("a"))] == [f.name for f in dataclasses.fields(reference)]
        assert dataclasses.asdict(ours("a", 2, [1])) == dataclasses.asdict(reference("a", 2, [1]))
        assert _record.replace(ours("a", 1), value=2) == dataclasses.replace(ours("a", 1), value=2) == ours("a", 2)
        with pytest.raises(ValueError):
            _record.replace(ours("a"), hidden=1)  # init=False: as dataclasses.replace refuses it
        assert ours.__match_args__ == reference.__match_args__
        assert ours.__dataclass_params__.frozen is frozen


def test_class_attributes_classvars_inheritance_and_refusals_as_dataclass():
    made = []
    for decorate in (dataclasses.dataclass, record):
        @decorate
        class Base:
            kind: ClassVar[str] = "base"
            name: str
            size: int = 1
            tags: list = field(default_factory=list)
            level: int = field(default=4)

        @decorate
        class Child(Base):
            extra: str = "x"

        made.append((Base, Child))
    (dc_base, dc_child), (base, child) = made
    for ours, theirs in ((base, dc_base), (child, dc_child)):
        assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(theirs)]
        assert ours.size == theirs.size == 1 and ours.level == theirs.level == 4 and ours.kind == "base"
        assert hasattr(ours, "tags") is hasattr(theirs, "tags") is False
    assert repr(child("n", 2)).split("(", 1)[1] == repr(dc_child("n", 2)).split("(", 1)[1]
    for bad in ("mutable", "order"):
        for decorate in (dataclasses.dataclass, record):
            with pytest.raises(ValueError if bad == "mutable" else TypeError):
                if bad == "mutable":
                    decorate(type("Bad", (), {"__annotations__": {"items": "list"}, "items": []}))
                else:
                    decorate(type("Bad", (), {"__annotations__": {"a": "int", "b": "int"}, "a": 1}))


def test_defining_and_using_records_does_not_import_dataclasses():
    """The quick path's classes are records so that dataclasses (and inspect, ast, dis...) stay out
    of `report --quick`'s start; records made, compared, replaced and hashed without it."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import sys
        from gpudoctor.core._record import field, fields, record, replace

        @record(frozen=True)
        class R:
            name: str
            items: tuple = ()
            extra: dict = field(default_factory=dict, compare=False)

        one = replace(R("a"), items=(1,))
        assert one == R("a", (1,)) and hash(one) == hash(R("a", (1,), {"x": 1})) and repr(one)
        assert [f.name for f in fields(R)] == ["name", "items", "extra"]
        print(sorted(m for m in ("dataclasses", "inspect") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
