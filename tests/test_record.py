"""gpudoctor._record.record behaves as dataclasses.dataclass for what the quick path's classes use:
the same class written with each gives the same results, errors included."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import field

import pytest

from gpudoctor._record import record


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
