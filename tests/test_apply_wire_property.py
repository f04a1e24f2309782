"""The changes door's two parsers at the API boundary: the daemon's reading of an apply request's body, and the
client's reading of the report (``daemon/wire_apply.py``). Each either gives back exactly what was meant or refuses
with its own error — never another exception, never a guess."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.api.errors import ApiError
from tkbox_daemon.api.routes_apply import parse_options
from tkbox_daemon.boxes.apply import ApplyOptions
from tkbox_daemon.limits import APPLY_ONLY_PATHS
from tkbox_daemon.wire_apply import FILE_ACTIONS, FILE_OUTCOMES, REPORT_STATUSES, ApplyFile, ApplyReport

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                max_size=3), max_leaves=8)
PATHS = st.lists(st.text(min_size=1, max_size=12), max_size=6)


@given(st.booleans(), st.booleans(), st.none() | PATHS)
def test_a_valid_body_is_read_exactly(dry_run, allow_sensitive, only):
    body = {"dry_run": dry_run, "allow_sensitive": allow_sensitive, **({} if only is None else {"only": only})}
    assert parse_options(body) == ApplyOptions(dry_run=dry_run, allow_sensitive=allow_sensitive,
                                               only=None if only is None else tuple(dict.fromkeys(only)))


@given(st.dictionaries(st.text(max_size=10), JSON, max_size=4))
def test_any_other_body_is_refused_with_a_400_naming_the_problem(body):
    try:
        options = parse_options(body)
    except ApiError as error:
        assert error.status in (400, 413) and error.message
        return
    assert set(body) <= {"dry_run", "only", "allow_sensitive"}
    assert all(isinstance(body.get(name, False), bool) for name in ("dry_run", "allow_sensitive"))
    assert options.only is None or (isinstance(body["only"], list) and all(isinstance(p, str) and p
                                                                           for p in body["only"]))


def test_only_is_bounded():
    with pytest.raises(ApiError) as refused:
        parse_options({"only": [f"f{n}" for n in range(APPLY_ONLY_PATHS.default + 1)]})
    assert refused.value.status == 413 and "apply_only" not in refused.value.message


FILES = st.builds(
    ApplyFile, path=st.text(min_size=1, max_size=10), action=st.sampled_from(FILE_ACTIONS),
    old_path=st.text(max_size=5), old_size=st.none() | st.integers(0, 2**40), new_size=st.none() | st.integers(0, 9),
    binary=st.booleans(), sensitive=st.text(max_size=5), included=st.booleans(),
    rule_ids=st.lists(st.text(max_size=6), max_size=3).map(tuple), outcome=st.sampled_from(FILE_OUTCOMES))
REPORTS = st.builds(ApplyReport, box_id=st.text(max_size=6), box_name=st.text(max_size=6),
                    status=st.sampled_from(REPORT_STATUSES), files=st.lists(FILES, max_size=4).map(tuple),
                    reason=st.text(max_size=10))


@given(REPORTS)
def test_a_report_reads_back_as_it_was_sent(report):
    assert ApplyReport.from_json(report.to_json()) == report


@given(REPORTS, st.data())
def test_a_damaged_report_is_refused_as_a_value_error_or_read_as_sent(report, data):
    sent = report.to_json()
    where = data.draw(st.sampled_from(["report", "file"] if sent["files"] else ["report"]))
    target = sent if where == "report" else sent["files"][0]
    key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(JSON)
    try:
        read = ApplyReport.from_json(sent)
    except ValueError:
        return
    assert read.to_json() == sent  # accepted only as it is: nothing coerced, nothing dropped
