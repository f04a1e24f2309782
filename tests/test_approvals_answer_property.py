"""Properties of the answer a person posts (``POST /v1/approvals/{id}``): the parser accepts exactly the bodies the
specification below allows (stated independently of the parser), reads them faithfully, and through the route's
own code a refused body changes nothing — the approval stays pending and nothing is recorded."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.approvals_fakes import FakeHost, asked
from tkbox_daemon.api.errors import ApiError
from tkbox_daemon.api.routes_approvals import answer_from_body
from tkbox_daemon.approvals.answer_body import AnswerRequest, InvalidAnswer, parse_answer
from tkbox_daemon.approvals.registry import ApprovalRegistry

KEYS = {"answer", "reason", "remember"}


def valid(value: Any) -> bool:
    """The specification: one object of only answer, reason, remember; answer approve or reject; reason a string of
    at most 1024 characters; remember a boolean, true only with approve."""
    if not isinstance(value, dict) or not set(value) <= KEYS or "answer" not in value:
        return False
    reason, remember = value.get("reason", ""), value.get("remember", False)
    return (value["answer"] in ("approve", "reject") and type(value["answer"]) is str
            and isinstance(reason, str) and len(reason) <= 1024
            and type(remember) is bool and not (remember and value["answer"] == "reject"))


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                                  max_size=3),
                           max_leaves=6)
answers = st.one_of(st.sampled_from(["approve", "reject"]), st.sampled_from(["Approve", "yes", "", "reject "]),
                    json_values)
reasons = st.one_of(st.text(max_size=40), st.text(min_size=1020, max_size=1030), json_values)
bodies = st.one_of(
    st.fixed_dictionaries({}, optional={"answer": answers, "reason": reasons, "remember": json_values,
                                        "by": st.text(max_size=10)}),
    st.fixed_dictionaries({"answer": st.sampled_from(["approve", "reject"])},
                          optional={"reason": reasons, "remember": st.booleans()}),
    json_values,
)


@settings(max_examples=400)
@given(value=bodies)
def test_the_parser_accepts_exactly_the_specified_answers_and_reads_them_faithfully(value):
    body = json.dumps(value).encode()
    event("valid" if valid(value) else "refused")
    if valid(value):
        parsed = parse_answer(body)
        assert parsed == AnswerRequest(value["answer"], value.get("reason", ""), value.get("remember", False))
    else:
        with pytest.raises(InvalidAnswer) as refused:
            parse_answer(body)
        assert str(refused.value)  # says what was wrong


@settings(max_examples=300)
@given(body=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode),
                      st.sampled_from([b"", b"{}", b'{"answer":"approve","answer":"reject"}', b'{"answer":NaN}',
                                       b'{"answer":"approve"} x', b"[" * 40, b'{"answer":"\\ud800"}'])))
def test_any_bytes_are_an_answer_or_a_clear_refusal(body):
    try:
        parsed = parse_answer(body)
    except InvalidAnswer as refused:
        assert str(refused)
        return
    assert parsed.answer in ("approve", "reject") and len(parsed.reason) <= 1024
    assert not (parsed.remember and parsed.answer == "reject")


@pytest.fixture(scope="module")
def loop():
    made = asyncio.new_event_loop()
    yield made
    made.close()


@settings(max_examples=300)
@given(value=bodies)
def test_through_the_route_a_refused_body_changes_nothing_and_an_accepted_one_answers_once(loop, value):
    async def once() -> None:
        registry, host = ApprovalRegistry(), FakeHost()
        approval = registry.open(host, **asked())
        try:
            info = await answer_from_body(registry, approval.info.id, json.dumps(value).encode(), lambda: "uid 0 (root)")
        except ApiError as error:
            assert not valid(value) and error.status == 400 and error.code == "invalid_request"
            assert approval.info.pending and host.records == [] and host.kinds() == ["approval.pending"]
            await registry.lose_all("the example ended")
            return
        assert valid(value)
        assert info.state == {"approve": "approved", "reject": "rejected"}[value["answer"]]
        assert [record["answer"] for record in host.records] == [value["answer"]]
        assert host.records[0]["reason"] == value.get("reason", "") and info.remember == value.get("remember", False)

    loop.run_until_complete(once())
