"""``record``: ``dataclasses.dataclass`` without its code generation, for the classes that every
``gpudoctor report --quick`` defines (the model, the backends' typed readings, the catalogue...).

``dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__`` (and, frozen,
``__setattr__``, ``__delattr__``, ``__hash__``) as source text and compiles it when the module is
imported: about 90 compilations on the quick path, a sixth of its instructions. ``record`` lets
``dataclass`` register the fields (so ``dataclasses.fields``, ``replace``, ``asdict`` and
``is_dataclass`` work as before) but generate nothing, and gives the class the same methods as
closures over its fields. Same behaviour: positional and keyword arguments, defaults and
``default_factory``, ``field(init=False)``, ``__post_init__``, frozen instances that raise
``dataclasses.FrozenInstanceError``, ``eq`` comparing the fields as a tuple (and, frozen, hashing
them; unfrozen, unhashable), ``repr`` as ``dataclass`` writes it. Construction is a little
slower per instance (a loop instead of straight-line code): nothing here is built in a hot loop.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:  # typing.dataclass_transform is 3.11; type checkers read it from typing_extensions
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorator: decorator

_T = TypeVar("_T")
_MISSING = dataclasses.MISSING


def _init_method(cls: type, frozen: bool) -> Callable[..., None]:
    every = dataclasses.fields(cls)
    takes = [f for f in every if f.init]
    names = tuple(f.name for f in takes)
    known = frozenset(names)
    later = [f for f in every if not f.init and (f.default is not _MISSING or f.default_factory is not _MISSING)]
    post_init = getattr(cls, "__post_init__", None) is not None
    put = object.__setattr__ if frozen else setattr

    def value_of(f: dataclasses.Field[Any], given: dict[str, Any]) -> Any:
        if f.name in given:
            return given[f.name]
        if f.default is not _MISSING:
            return f.default
        if f.default_factory is not _MISSING:
            return f.default_factory()
        raise TypeError(f"{cls.__qualname__}.__init__() missing 1 required argument: {f.name!r}")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{cls.__qualname__}.__init__() takes {len(names) + 1} positional arguments "
                            f"but {len(args) + 1} were given")
        given = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in known:
                raise TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword argument {key!r}")
            if key in given:
                raise TypeError(f"{cls.__qualname__}.__init__() got multiple values for argument {key!r}")
            given[key] = value
        for f in takes:
            put(self, f.name, value_of(f, given))
        for f in later:
            put(self, f.name, value_of(f, {}))
        if post_init:
            self.__post_init__()

    return __init__


def _compared(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    names = tuple(f.name for f in dataclasses.fields(cls) if f.compare)
    return lambda obj: tuple(getattr(obj, name) for name in names)


def _add_methods(cls: type, frozen: bool, eq: bool) -> None:
    shown = tuple(f.name for f in dataclasses.fields(cls) if f.repr)
    own = cls.__dict__
    # set through setattr: a checker types `cls.__repr__` as the bound method of the class object
    methods: dict[str, Callable[..., Any] | None] = {}
    if "__init__" not in own:
        methods["__init__"] = _init_method(cls, frozen)
    if "__repr__" not in own:
        def __repr__(self: Any) -> str:
            inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
            return f"{type(self).__qualname__}({inner})"
        methods["__repr__"] = __repr__
    if eq and "__eq__" not in own:
        values = _compared(cls)

        def __eq__(self: Any, other: object) -> bool:
            if other.__class__ is self.__class__:
                return values(self) == values(other)
            return NotImplemented

        def __hash__(self: Any) -> int:
            return hash(values(self))
        methods["__eq__"] = __eq__
        if "__hash__" not in own:
            methods["__hash__"] = __hash__ if frozen else None
    if frozen:
        methods.update(_frozen_methods(cls, frozenset(f.name for f in dataclasses.fields(cls))))
    for name, method in methods.items():
        setattr(cls, name, method)


def _frozen_methods(cls: type[object], names: frozenset[str]) -> dict[str, Callable[..., Any] | None]:

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return {"__setattr__": __setattr__, "__delattr__": __delattr__}


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[_T] | None = None, /, *, frozen: bool = False, eq: bool = True) -> Any:
    """``@record``, ``@record(frozen=True)``, ``@record(frozen=True, eq=False)``: as ``@dataclass``."""
    def wrap(target: type[_T]) -> type[_T]:
        made = dataclasses.dataclass(target, init=False, repr=False, eq=False)  # fields only: nothing compiled
        _add_methods(made, frozen, eq)
        return made
    return wrap if cls is None else wrap(cls)


__all__ = ["record"]
