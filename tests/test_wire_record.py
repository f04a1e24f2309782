"""``record`` builds what a dataclass of the same declaration would: each property below compares a record with the
dataclass made from the same fields (construction by position and keyword, defaults, the TypeErrors, equality,
hashing, frozenness, repr), and the wire's own classes keep working with ``dataclasses.replace``/``fields``/``asdict``,
which the daemon and the console call on them."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon import limits, wire, wire_apply, wire_egress, wire_host
from tkbox_daemon.wire_record import FrozenInstanceError, as_dict, field, record

WIRE_CLASSES = [value for module in (wire, wire_apply, wire_egress, wire_host, limits) for value in vars(module).values()
                if isinstance(value, type) and "__dataclass_fields__" in vars(value)
                and value.__module__ == module.__name__]


@record(frozen=True)
class FrozenPair:
    left: int
    right: str = "r"
    extra: list[int] = field(default_factory=list)


@record
class MutablePair:
    left: int
    right: str = "r"
    extra: list[int] = field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class FrozenTwin:
    left: int
    right: str = "r"
    extra: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class MutableTwin:
    left: int
    right: str = "r"
    extra: list[int] = dataclasses.field(default_factory=list)


@record(frozen=True)
class FrozenPoint:
    left: int
    right: str


@dataclasses.dataclass(frozen=True)
class FrozenPointTwin:
    left: int
    right: str


PAIRS = [(FrozenPair, FrozenTwin), (MutablePair, MutableTwin)]
values = st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3), st.none())
positional = st.lists(values, max_size=4)
keywords = st.dictionaries(st.sampled_from(["left", "right", "extra", "other"]), values, max_size=3)
few = st.lists(st.integers(), max_size=4)


def _outcome(cls: type, args: list[Any], kwargs: dict[str, Any]) -> Any:
    try:
        made = cls(*args, **kwargs)
    except TypeError as error:
        return ("TypeError", str(error).replace(cls.__qualname__, "X"))
    return made


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=["frozen", "mutable"])
@given(args=positional, kwargs=keywords)
def test_a_record_binds_arguments_as_the_dataclass_does(ours, theirs, args, kwargs):
    made, expected = _outcome(ours, args, kwargs), _outcome(theirs, args, kwargs)
    if isinstance(expected, tuple):
        assert made == expected
        return
    assert [getattr(made, name) for name in ("left", "right", "extra")] == \
           [getattr(expected, name) for name in ("left", "right", "extra")]
    assert repr(made).replace(ours.__name__, "X") == repr(expected).replace(theirs.__name__, "X")


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=["frozen", "mutable"])
@given(a=st.tuples(st.integers(), st.text(max_size=3)), b=st.tuples(st.integers(), st.text(max_size=3)))
def test_equality_and_hashing_are_the_dataclass_s(ours, theirs, a, b):
    assert (ours(*a) == ours(*b)) == (theirs(*a) == theirs(*b))
    assert ours(*a) != theirs(*a)  # another class is never equal, as between two dataclasses
    with pytest.raises(TypeError):  # mutable: unhashable; frozen with a list in a field: unhashable too
        hash(ours(*a))
    assert (ours.__hash__ is None) == (theirs.__hash__ is None)


@given(a=st.tuples(st.integers(), st.text(max_size=3)))
def test_a_frozen_record_hashes_as_the_dataclass_does(a):
    assert hash(FrozenPoint(*a)) == hash(FrozenPointTwin(*a))
    assert {FrozenPoint(*a): 1}[FrozenPoint(*a)] == 1


def test_a_frozen_record_refuses_assignment_and_a_default_factory_is_called_each_time():
    pair = FrozenPair(1)
    with pytest.raises(FrozenInstanceError):
        pair.left = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del pair.right
    assert FrozenPair(1).extra is not FrozenPair(1).extra
    mutable = MutablePair(1)
    mutable.left = 5
    assert mutable == MutablePair(5)


def test_a_field_without_a_default_after_one_with_a_default_is_refused_as_a_dataclass_refuses_it():
    with pytest.raises(TypeError, match="follows one with a default"):
        @record
        class Broken:
            first: int = 1
            second: int


@pytest.mark.parametrize("cls", WIRE_CLASSES, ids=lambda cls: cls.__name__)
def test_every_wire_class_takes_the_dataclass_helpers(cls):
    fields = list(cls.__dataclass_fields__.values())
    required = [spec.name for spec in fields if spec.default is dataclasses.MISSING
                and spec.default_factory is dataclasses.MISSING]
    sample = cls(**{name: _sample(spec.type) for spec in fields if (name := spec.name) in required})
    assert [spec.name for spec in dataclasses.fields(sample)] == [spec.name for spec in fields]
    assert dataclasses.asdict(sample) == as_dict(sample)
    first = fields[0]
    changed = dataclasses.replace(sample, **{first.name: _sample(first.type, 1)})
    assert changed != sample and type(changed) is cls
    assert dataclasses.replace(sample) == sample
    assert dataclasses.is_dataclass(sample)
    assert list(inspect.signature(cls).parameters) in ([spec.name for spec in fields], ["args", "kwargs"])


def _sample(annotation: str, variant: int = 0) -> Any:
    base = annotation.split(" | ")[0].split("[")[0]
    return {"int": 1 + variant, "str": f"s{variant}", "bool": bool(variant), "dict": {"k": variant},
            "list": [variant], "tuple": (f"t{variant}",)}.get(base, f"s{variant}")


@record
class ThreeRequired:
    first: int
    second: int
    third: int
    fourth: int = 4


@dataclasses.dataclass
class ThreeRequiredTwin:
    first: int
    second: int
    third: int
    fourth: int = 4


@given(args=few, kwargs=st.dictionaries(st.sampled_from(["first", "second", "third", "fourth", "fifth"]),
                                        st.integers(), max_size=3))
def test_missing_and_surplus_arguments_are_named_as_python_names_them(args, kwargs):
    made, expected = _outcome(ThreeRequired, args, kwargs), _outcome(ThreeRequiredTwin, args, kwargs)
    if isinstance(expected, tuple):
        assert made == expected
    else:
        assert vars(made) == vars(expected)
