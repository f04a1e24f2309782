"""The pty additions to the agent channel's schemas: ``exec`` with ``pty``/``rows``/``cols`` and the ``resize`` op;
plus the guest's pty helpers on a real pty pair (unit and Hypothesis)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_guest import protocol as P
from tkbox_guest import ptys

EXEC = {"id": 1, "op": "exec", "argv": ["sh"], "cwd": "/workspace", "env": {}, "timeout_ms": 0}
RESIZE = {"id": 2, "op": "resize", "target": 1, "rows": 24, "cols": 80}


def test_a_pty_exec_gets_its_size_or_24_by_80():
    assert P.validate_request({**EXEC, "pty": True, "rows": 1, "cols": 1000})[("rows")] == 1
    filled = P.validate_request({**EXEC, "pty": True})
    assert (filled["pty"], filled["rows"], filled["cols"]) == (True, 24, 80)
    plain = P.validate_request(EXEC)
    assert plain["pty"] is False and "rows" not in plain


@pytest.mark.parametrize("request_", [
    {**EXEC, "rows": 24, "cols": 80}, {**EXEC, "pty": False, "rows": 24, "cols": 80},
    {**EXEC, "pty": True, "rows": 24}, {**EXEC, "pty": True, "cols": 80},
    {**EXEC, "pty": True, "rows": 0, "cols": 80}, {**EXEC, "pty": True, "rows": 24, "cols": 1001},
    {**EXEC, "pty": True, "rows": True, "cols": 80}, {**EXEC, "pty": True, "rows": "24", "cols": 80},
    {k: v for k, v in RESIZE.items() if k != "target"}, {k: v for k, v in RESIZE.items() if k != "rows"},
    {**RESIZE, "rows": 0}, {**RESIZE, "cols": 1001}, {**RESIZE, "target": -1}, {**RESIZE, "target": 2**32},
    {**RESIZE, "extra": 1}, {**RESIZE, "rows": False},
])
def test_invalid_pty_requests(request_):
    with pytest.raises(P.ProtocolError):
        P.validate_request(request_)


def test_resize_request_and_response():
    assert P.validate_request(RESIZE) == RESIZE
    assert P.validate_response({"id": 2, "ok": True}, "resize")
    assert P.validate_response({"id": 2, "ok": False, "error": {"code": "ENOTTY", "message": "no pty"}}, "resize")
    with pytest.raises(P.ProtocolError):
        P.validate_response({"id": 2, "ok": True, "rows": 1}, "resize")


_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 1002), st.integers(), st.text(max_size=4),
                    st.lists(st.integers(), max_size=2))


@given(st.fixed_dictionaries({"id": st.integers(0, 5), "op": st.just("resize")},
                             optional={"target": _values, "rows": _values, "cols": _values, "x": _values}))
def test_resize_is_valid_exactly_when_every_field_is_in_bounds(obj):
    def good(key: str, high: int) -> bool:
        return type(obj.get(key)) is int and 1 - (key == "target") <= obj[key] <= high

    expected = set(obj) == {"id", "op", "target", "rows", "cols"} and good("target", P.MAX_U32) \
        and good("rows", 1000) and good("cols", 1000)
    try:
        P.validate_request(obj)
    except P.ProtocolError:
        assert not expected
    else:
        assert expected


@given(pty=st.one_of(st.just(None), _values), rows=st.one_of(st.just(None), _values),
       cols=st.one_of(st.just(None), _values))
def test_a_valid_exec_always_has_a_bounded_size_when_it_has_a_pty(pty, rows, cols):
    obj = {**EXEC, **{k: v for k, v in (("pty", pty), ("rows", rows), ("cols", cols)) if v is not None}}
    try:
        checked = P.validate_request(obj)
    except P.ProtocolError:
        return
    assert type(checked["pty"]) is bool
    if checked["pty"]:
        assert 1 <= checked["rows"] <= P.MAX_WINSIZE and 1 <= checked["cols"] <= P.MAX_WINSIZE
    else:
        assert "rows" not in checked and "cols" not in checked


@given(rows=st.integers(1, 1000), cols=st.integers(1, 1000))
def test_pty_sizes_round_trip_through_the_kernel(rows, cols):
    master, slave = ptys.open_pty(rows, cols)
    try:
        assert ptys.get_size(slave) == (rows, cols)
        ptys.set_size(master, cols, rows)
        assert ptys.get_size(slave) == (cols, rows)
        assert not os.get_inheritable(master) and not os.get_inheritable(slave)
        assert ptys.foreground_group(master) is None  # no session has it as its terminal
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize(("rows", "cols"), [(0, 1), (1, 0), (1001, 1), (1, 1001), (True, 1), (1, "2")])
def test_pty_helpers_refuse_sizes_out_of_bounds(rows, cols):
    with pytest.raises(ValueError):
        ptys.open_pty(rows, cols)
