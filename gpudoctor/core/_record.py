"""``record``: ``dataclasses.dataclass`` without ``dataclasses``, for the classes that every
``gpudoctor report --quick`` defines (the model, the backends' typed readings, the catalogue...).

``dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__`` (and, frozen,
``__setattr__``, ``__delattr__``, ``__hash__``) as source text and compiles it when the module is
imported: about 90 compilations on the quick path, a sixth of its instructions; and importing
``dataclasses`` imports ``inspect`` (``ast``, ``dis``, ``tokenize``...), about 5 ms of a 70 ms
report. ``record`` reads the fields from the class's annotations itself and gives the class the
same methods as closures over its fields. Same behaviour: positional and keyword arguments,
defaults and ``default_factory``, ``field(init=False)``, ``__post_init__``, frozen instances that
raise ``dataclasses.FrozenInstanceError``, ``eq`` comparing the fields as a tuple (and, frozen,
hashing them; unfrozen, unhashable), ``repr`` as ``dataclass`` writes it, ``ClassVar``
annotations left out, fields of record base classes first. Construction is a little slower per
instance (a loop instead of straight-line code): nothing here is built in a hot loop.

Code off the quick path may still call ``dataclasses.fields``, ``replace``, ``asdict`` or
``is_dataclass`` on a record: the class's ``__dataclass_fields__`` (and ``__dataclass_params__``)
are made, with ``dataclasses``, the first time they are read. Code on the quick path uses
:func:`fields` and :func:`replace` here instead, and :func:`field` in place of ``dataclasses.field``
(which is also accepted).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:  # typing.dataclass_transform is 3.11; type checkers read it from typing_extensions
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorator: decorator

_T = TypeVar("_T")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """One field of a record: what ``dataclasses.Field`` holds that a record uses."""

    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "hash", "compare", "metadata")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, init: bool = True, repr: bool = True,
                 hash: bool | None = None, compare: bool = True, metadata: Any = None) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.hash, self.compare, self.metadata = init, repr, hash, compare, metadata

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, init={self.init}, compare={self.compare})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING, init: bool = True, repr: bool = True,
          hash: bool | None = None, compare: bool = True, metadata: Any = None) -> Any:
    """As ``dataclasses.field`` (without ``kw_only``)."""
    return Field(default, default_factory, init, repr, hash, compare, metadata)


def _from_dataclasses_field(value: Any) -> Field:
    """A ``dataclasses.field(...)`` written in a record, as a :class:`Field`."""
    loaded = sys.modules["dataclasses"]
    return Field(MISSING if value.default is loaded.MISSING else value.default,
                 MISSING if value.default_factory is loaded.MISSING else value.default_factory,
                 value.init, value.repr, value.hash, value.compare, dict(value.metadata) or None)


def _is_class_var(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))
    typing = sys.modules.get("typing")
    return typing is not None and (annotation is typing.ClassVar or getattr(annotation, "__origin__", None)
                                   is typing.ClassVar)


def _field_of(cls: type, name: str, annotation: Any) -> Field:
    if isinstance(annotation, str) and annotation.startswith(("InitVar", "dataclasses.InitVar", "KW_ONLY")):
        raise TypeError(f"{cls.__qualname__}.{name}: a record has no InitVar or KW_ONLY fields (use dataclass)")
    value = cls.__dict__.get(name, MISSING)
    loaded = sys.modules.get("dataclasses")
    if isinstance(value, Field):
        made = value
    elif loaded is not None and isinstance(value, loaded.Field):
        made = _from_dataclasses_field(value)
    else:
        made = Field(default=value)
    made.name, made.type = name, annotation
    if made.default is not MISSING and type(made.default).__hash__ is None:  # as dataclass refuses it
        raise ValueError(f"mutable default {type(made.default)} for field {name} is not allowed: use default_factory")
    if made is not value and made.default is value:  # a plain default stays the class attribute
        return made
    if made.default is MISSING:  # field(...) written in the class: its default (if any) in its place
        if name in cls.__dict__:
            delattr(cls, name)
    else:
        setattr(cls, name, made.default)
    return made


def _collect(cls: type) -> tuple[Field, ...]:
    """The record's fields, those of record base classes first (in their order), as dataclass does."""
    every: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("__record_fields__", ()):
            every[f.name] = f
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if not _is_class_var(annotation):
            every[name] = _field_of(cls, name, annotation)
    seen_default = ""
    for f in every.values():
        if not f.init:
            continue
        if f.default is MISSING and f.default_factory is MISSING and seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = f.name
    return tuple(every.values())


def fields(class_or_instance: Any) -> tuple[Field, ...]:
    """A record's fields (``dataclasses.fields`` without ``dataclasses``)."""
    try:
        return tuple(class_or_instance.__record_fields__)
    except AttributeError:
        raise TypeError("must be called with a record type or instance") from None


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of a record with some fields changed (``dataclasses.replace`` without ``dataclasses``)."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
            continue
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


class _AsDataclass:
    """``__dataclass_fields__`` and ``__dataclass_params__`` of a record, made with ``dataclasses``
    the first time either is read (by ``dataclasses.fields``, ``replace``, ``asdict``...)."""

    def __init__(self, owner: type, frozen: bool, eq: bool) -> None:
        self.owner, self.frozen, self.eq = owner, frozen, eq
        self.attribute = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = name

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        import dataclasses
        namespace: dict[str, Any] = {"__annotations__": {}, "__module__": self.owner.__module__}
        for f in self.owner.__record_fields__:  # type: ignore[attr-defined]
            namespace["__annotations__"][f.name] = f.type
            namespace[f.name] = dataclasses.field(
                default=dataclasses.MISSING if f.default is MISSING else f.default,
                default_factory=dataclasses.MISSING if f.default_factory is MISSING else f.default_factory,
                init=f.init, repr=f.repr, hash=f.hash, compare=f.compare, metadata=f.metadata)
        shadow: Any = dataclasses.dataclass(type(self.owner.__name__, (), namespace), init=False, repr=False,
                                            eq=self.eq, frozen=self.frozen)
        made = {"__dataclass_fields__": shadow.__dataclass_fields__, "__dataclass_params__": shadow.__dataclass_params__}
        for name, value in made.items():
            setattr(self.owner, name, value)
        return made[self.attribute]


def _writes_dict(cls: type, names: tuple[str, ...], frozen: bool) -> bool:
    """Whether ``__init__`` may put the values in the instance's ``__dict__`` at once: what
    ``object.__setattr__`` does where no field is a slot or a data descriptor (a frozen record's
    own ``__init__`` writes that way; an unfrozen one's only without a ``__setattr__`` of its own)."""
    own_setattr: object = cls.__setattr__
    if not frozen and own_setattr is not object.__setattr__:
        return False
    return not any(hasattr(type(cls.__dict__.get(name, getattr(cls, name, None))), "__set__") for name in names)


def _init_method(cls: type, every: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """``__init__`` for the fields: the defaults copied from one dict, the arguments laid over them,
    then every value set (in the fields' order), one field at a time only where that is needed."""
    takes = tuple(f.name for f in every if f.init)
    known = frozenset(takes)
    plain = {f.name: f.default for f in every if f.init and f.default is not MISSING}
    factories = tuple((f.name, f.default_factory) for f in every if f.init and f.default is MISSING
                      and f.default_factory is not MISSING)
    later = tuple(f for f in every if not f.init and (f.default is not MISSING or f.default_factory is not MISSING))
    order = takes + tuple(f.name for f in later)
    post_init = getattr(cls, "__post_init__", None) is not None
    direct = _writes_dict(cls, order, frozen)
    put = object.__setattr__ if frozen else setattr

    def refuse(args: tuple[Any, ...], kwargs: dict[str, Any], values: dict[str, Any]) -> TypeError:
        for key in kwargs:
            if key not in known:
                return TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword argument {key!r}")
            if key in takes[:len(args)]:
                return TypeError(f"{cls.__qualname__}.__init__() got multiple values for argument {key!r}")
        missing = next(name for name in takes if name not in values)
        return TypeError(f"{cls.__qualname__}.__init__() missing 1 required argument: {missing!r}")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(takes):
            raise TypeError(f"{cls.__qualname__}.__init__() takes {len(takes) + 1} positional arguments "
                            f"but {len(args) + 1} were given")
        values = plain.copy()
        if args:
            values.update(zip(takes, args))
        if kwargs:
            if not known.issuperset(kwargs) or (args and not known.difference(takes[:len(args)]).issuperset(kwargs)):
                raise refuse(args, kwargs, values)
            values.update(kwargs)
        for name, factory in factories:
            if name not in values:
                values[name] = factory()
        if len(values) != len(takes):
            raise refuse(args, kwargs, values)
        for f in later:
            values[f.name] = f.default if f.default is not MISSING else f.default_factory()
        if direct:
            self.__dict__.update({name: values[name] for name in order})
        else:
            for name in order:
                put(self, name, values[name])
        if post_init:
            self.__post_init__()

    return __init__


def _add_methods(cls: type, every: tuple[Field, ...], frozen: bool, eq: bool) -> None:
    shown = tuple(f.name for f in every if f.repr)
    own = cls.__dict__
    # set through setattr: a checker types `cls.__repr__` as the bound method of the class object
    methods: dict[str, Callable[..., Any] | None] = {}
    if "__init__" not in own:
        methods["__init__"] = _init_method(cls, every, frozen)
    if "__repr__" not in own:
        def __repr__(self: Any) -> str:
            inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
            return f"{type(self).__qualname__}({inner})"
        methods["__repr__"] = __repr__
    if eq and "__eq__" not in own:
        compared = tuple(f.name for f in every if f.compare)

        def values(obj: Any) -> tuple[Any, ...]:
            return tuple(getattr(obj, name) for name in compared)

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
        methods.update(_frozen_methods(cls, frozenset(f.name for f in every)))
    for name, method in methods.items():
        setattr(cls, name, method)


def _frozen(message: str) -> Exception:
    import dataclasses  # the error dataclass raises (only when a frozen record is written to)
    return dataclasses.FrozenInstanceError(message)


def _frozen_methods(cls: type[object], names: frozenset[str]) -> dict[str, Callable[..., Any] | None]:

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise _frozen(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise _frozen(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return {"__setattr__": __setattr__, "__delattr__": __delattr__}


@dataclass_transform(field_specifiers=(field, Field))
def record(cls: type[_T] | None = None, /, *, frozen: bool = False, eq: bool = True) -> Any:
    """``@record``, ``@record(frozen=True)``, ``@record(frozen=True, eq=False)``: as ``@dataclass``."""
    def wrap(target: type[_T]) -> type[_T]:
        every = _collect(target)
        target.__record_fields__ = every  # type: ignore[attr-defined]
        target.__match_args__ = tuple(f.name for f in every if f.init)  # type: ignore[attr-defined,misc]
        for name in ("__dataclass_fields__", "__dataclass_params__"):
            lazy = _AsDataclass(target, frozen, eq)
            lazy.__set_name__(target, name)
            setattr(target, name, lazy)
        _add_methods(target, every, frozen, eq)
        return target
    return wrap if cls is None else wrap(cls)


__all__ = ["Field", "MISSING", "field", "fields", "record", "replace"]
