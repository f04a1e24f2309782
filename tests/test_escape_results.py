"""The host's reading of the escape probe's output (``e2e.escape_lab.parse_results``): the box writes it, so it may
be anything; the reading never raises and keeps exactly the well-formed result lines."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from e2e.escape_lab import parse_results

TOKENS = st.text(min_size=1, max_size=40)
NOT_A_LINE_BREAK = st.binary(max_size=200).filter(lambda line: b"\n" not in line and b"\r" not in line)


@given(st.binary(max_size=4096))
def test_any_output_reads_as_string_results_without_raising(output):
    results = parse_results(output)
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in results.items())


@given(st.lists(st.tuples(TOKENS, TOKENS), max_size=20),
       st.lists(NOT_A_LINE_BREAK.filter(lambda line: not parse_results(line)), max_size=20), st.randoms())
def test_result_lines_are_kept_exactly_whatever_lies_between_them(pairs, garbage, random):
    lines = [json.dumps({"id": ident, "result": result}).encode() for ident, result in pairs]
    for line in garbage:  # garbage anywhere, result lines in their order
        lines.insert(random.randint(0, len(lines)), line)
    assert parse_results(b"\n".join(lines)) == dict(pairs)  # a later line for an id wins, as in dict()


def test_hostile_shapes_are_no_result():
    for line in (b"[" * 100_000, b'{"id": 1, "result": "ok"}', b'{"id": "x", "result": null}', b'"ok"',
                 b"\xff\xfe{", b'{"id": "x"}'):
        assert parse_results(line) == {}, line
