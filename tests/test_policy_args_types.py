"""Argument shape problems name JSON types (``null``, ``array``), never Python's (``NoneType``, ``list``): the
text reaches operators through the CLI and the console, who write JSON."""

from __future__ import annotations

import pytest

from tkbox_daemon.policy.args import check_args, json_type


@pytest.mark.parametrize(("value", "name"), [
    (None, "null"), (True, "boolean"), (3, "number"), (2.5, "number"), ("x", "string"), ([1], "array"),
    ((1,), "array"), ({"a": 1}, "object"), (b"x", "a Python bytes")])
def test_json_type_names(value, name):
    assert json_type(value) == name


@pytest.mark.parametrize(("args", "said"), [
    ([1], "arguments must be a JSON object, got array"),
    (None, "arguments must be a JSON object, got null"),
    ({"command": None}, "argument 'command' must be a string, got null"),
    ({"command": False}, "argument 'command' must be a string, got boolean"),
])
def test_problems_name_json_types(args, said):
    problem = check_args("shell", "Bash", args)
    assert problem is not None and said in problem.reason
    assert "NoneType" not in problem.reason and "bool" not in problem.reason.replace("boolean", "")
