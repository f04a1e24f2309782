"""``record``: the wire schema's small value classes, built without the standard library's ``dataclasses``.

A CLI command imports the wire schema (and ``limits``) on every call, and ``dataclasses`` costs ~11 ms to import (it
pulls ``inspect``, ``ast``, ``dis`` and ``tokenize``) plus ~1 ms per class it builds (it compiles source for each
method).  ``record`` gives a class what those classes use of a dataclass, from the same declaration (annotated
fields in order, a default or ``field(default_factory=…)`` for the optional ones) and without compiling anything:
an ``__init__`` taking the fields by position or keyword with the same defaults and the same ``TypeError``s, and
field-wise ``__eq__``, ``__repr__`` and, for ``frozen=True``, ``__hash__`` and no assignment
(``FrozenInstanceError``, an ``AttributeError``); a mutable record is unhashable, as a mutable dataclass is.

``__dataclass_fields__`` holds a ``RecordField`` per field, enough for ``dataclasses.replace``, ``fields`` and
``asdict`` to work on a record as on a dataclass (they read a field's ``name``, ``init``, ``default`` and kind; the
kind is asked of ``dataclasses`` itself, which is imported by then).  ``as_dict`` is ``asdict`` without the import.
"""

from __future__ import annotations

import sys
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "<factory>"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen record (or to any attribute of one)."""


class RecordField:
    """One field of a record: its name, its annotation (text), and its default or default factory (``MISSING``:
    none; to a caller that uses ``dataclasses``, its ``MISSING``)."""

    __slots__ = ("name", "type", "given_default", "given_factory")
    init = True
    repr = True
    compare = True

    def __init__(self, name: str, annotation: str, default: Any = MISSING, default_factory: Any = MISSING) -> None:
        self.name = name
        self.type = annotation
        self.given_default = default
        self.given_factory = default_factory

    @property
    def default(self) -> Any:
        return _theirs(self.given_default)

    @property
    def default_factory(self) -> Any:
        return _theirs(self.given_factory)

    @property
    def _field_type(self) -> Any:  # what ``dataclasses`` reads to tell a field from a ClassVar or an InitVar
        return sys.modules["dataclasses"]._FIELD  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"RecordField({self.name!r})"


def _theirs(value: Any) -> Any:
    """``MISSING`` as whoever reads a field knows it: ``dataclasses.MISSING`` once that module is loaded."""
    if value is MISSING and "dataclasses" in sys.modules:
        return sys.modules["dataclasses"].MISSING
    return value


class _Factory:
    __slots__ = ("factory",)

    def __init__(self, factory: Any) -> None:
        self.factory = factory


def field(*, default_factory: Any) -> Any:
    """A field whose default is made anew for each record (``field(default_factory=list)``)."""
    return _Factory(default_factory)


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[T] | None = None, *, frozen: bool = False) -> Any:
    """Make ``cls`` a record of its annotated fields (see the module's docstring); used as ``@record`` or
    ``@record(frozen=True)``."""

    def build(target: type[T]) -> type[T]:
        return _build(target, frozen)

    return build if cls is None else build(cls)


def _build(cls: type[T], frozen: bool) -> type[T]:
    fields: dict[str, RecordField] = {}
    optional_seen = False
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if str(annotation).startswith("ClassVar"):
            continue
        default = cls.__dict__.get(name, MISSING)
        if isinstance(default, _Factory):
            fields[name] = RecordField(name, annotation, default_factory=default.factory)
            delattr(cls, name)
        elif default is MISSING and optional_seen:
            raise TypeError(f"{cls.__name__}: field {name} without a default follows one with a default")
        else:
            fields[name] = RecordField(name, annotation, default=default)
        optional_seen = optional_seen or default is not MISSING
    names = tuple(fields)
    cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]
    cls.__match_args__ = names  # type: ignore[attr-defined]
    cls.__init__ = _init(cls, fields)  # type: ignore[misc]
    values = attrgetter(*names) if len(names) > 1 else (lambda record: (getattr(record, names[0]),))

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return values(self) == values(other)

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    cls.__eq__ = __eq__  # type: ignore[method-assign,assignment]
    cls.__repr__ = __repr__  # type: ignore[method-assign,assignment]
    if frozen:
        def __hash__(self: Any) -> int:
            return hash(values(self))

        def __setattr__(self: Any, name: str, value: Any) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self: Any, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

        cls.__hash__ = __hash__  # type: ignore[method-assign,assignment]
        cls.__setattr__ = __setattr__  # type: ignore[method-assign,assignment]
        cls.__delattr__ = __delattr__  # type: ignore[method-assign,assignment]
    else:
        cls.__hash__ = None  # type: ignore[assignment]  # mutable and compared by value: unhashable
    for method in ("__init__", "__eq__", "__repr__", "__hash__", "__setattr__", "__delattr__"):
        function = cls.__dict__.get(method)
        if function is not None and hasattr(function, "__qualname__"):
            function.__qualname__ = f"{cls.__qualname__}.{method}"
    return cls


def _init(cls: type, fields: dict[str, RecordField]) -> Any:
    """``__init__(self, <each field, with its default>)``, binding arguments as Python would for that signature
    (a closure, not generated source: compiling costs more at import than binding costs per call)."""
    names = tuple(fields)
    count = len(names)
    made = {name: spec for name, spec in fields.items()
            if spec.given_default is not MISSING or spec.given_factory is not MISSING}
    required = count - len(made)  # the fields without a default come first
    where = f"{cls.__qualname__}.__init__()"
    field_names = frozenset(names)
    required_names = frozenset(names[:required])
    plain_defaults = {name: spec.given_default for name, spec in made.items() if spec.given_factory is MISSING}
    factories = {name: spec.given_factory for name, spec in made.items() if spec.given_factory is not MISSING}

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        state = self.__dict__
        given = len(args)
        if not kwargs and given == count:
            for name, value in zip(names, args, strict=True):
                state[name] = value
            return
        if not given and kwargs.keys() <= field_names and required_names <= kwargs.keys():  # all by keyword
            state.update(plain_defaults)
            for name, factory in factories.items():
                if name not in kwargs:
                    state[name] = factory()
            state.update(kwargs)
            return
        for name in kwargs:  # Python's own checks, in its order and words
            if name not in fields:
                raise TypeError(f"{where} got an unexpected keyword argument {name!r}")
            if names.index(name) < given:
                raise TypeError(f"{where} got multiple values for argument {name!r}")
        if given > count:
            takes = f"from {required + 1} to {count + 1}" if required < count else f"{count + 1}"
            raise TypeError(f"{where} takes {takes} positional arguments but {given + 1} were given")
        missing = [name for name in names[given:required] if name not in kwargs]
        if missing:
            raise TypeError(f"{where} missing {len(missing)} required positional argument"
                            f"{'s' if len(missing) > 1 else ''}: {_listed(missing)}")
        for index, name in enumerate(names):
            if index < given:
                state[name] = args[index]
            elif name in kwargs:
                state[name] = kwargs[name]
            else:
                spec = made[name]
                state[name] = spec.given_default if spec.given_factory is MISSING else spec.given_factory()

    return __init__


def _listed(names: list[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b', and 'c'``: how Python lists missing arguments."""
    quoted = [repr(name) for name in names]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} and {quoted[1]}"
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def as_dict(value: Any) -> Any:
    """``dataclasses.asdict``: a record as a dict of its fields, records, lists, tuples and dicts in it copied
    through (a tuple stays a tuple); other values as they are (the wire holds only JSON values)."""
    fields = getattr(type(value), "__dataclass_fields__", None)
    if fields is not None:
        return {name: as_dict(getattr(value, name)) for name in fields}
    if isinstance(value, list | tuple):
        return type(value)(as_dict(item) for item in value)
    if isinstance(value, dict):
        return {as_dict(key): as_dict(item) for key, item in value.items()}
    return value
