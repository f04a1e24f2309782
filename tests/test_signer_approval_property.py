"""Properties of the ``tkbox.approval`` value parser: it accepts exactly the one shape
``{approval_id, decision_id, answer, by, reason}`` (as the specification below states it, independently), and through
the signer a refused answer records nothing while an accepted one records exactly one record naming its decision."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tkbox_daemon.evidence.approval_record import ApprovalValueError, parse_value
from tkbox_daemon.policy import PolicyContext, load_pack
from tkbox_daemon.signer.idempotency import new_request_id
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.service import SignerService
from tkbox_daemon.signer.store import LogStore

ANSWERS = ["approve", "reject", "expire", "withdraw", "lost"]
FIELDS = {"approval_id", "decision_id", "answer", "by", "reason"}


def valid_shape(value: Any) -> bool:
    """The specification: exactly five fields; ids of their one pattern; a known answer; by ≤ 256, reason ≤ 1024."""
    return (
        isinstance(value, dict) and set(value) == FIELDS
        and all(isinstance(value[name], str) for name in FIELDS)
        and re.fullmatch(r"apr-[0-9a-f]{16}", value["approval_id"], re.ASCII) is not None
        and re.fullmatch(r"dec-[0-9a-f]{32}", value["decision_id"], re.ASCII) is not None
        and value["answer"] in ANSWERS and len(value["by"]) <= 256 and len(value["reason"]) <= 1024
    )


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                                                  max_size=3),
                           max_leaves=6)


APPROVAL_ID = st.from_regex(r"apr-[0-9a-f]{16}", fullmatch=True)
DECISION_ID = st.from_regex(r"dec-[0-9a-f]{32}", fullmatch=True)


def text_up_to(limit: int) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=20), st.integers(limit - 2, limit).map(lambda n: "é" * n))


valid_values = st.fixed_dictionaries({
    "approval_id": APPROVAL_ID, "decision_id": DECISION_ID, "answer": st.sampled_from(ANSWERS),
    "by": text_up_to(256), "reason": text_up_to(1024),
})


def off(good: st.SearchStrategy[str], alphabet: str) -> st.SearchStrategy[str]:
    """Strings just off a pattern: another case, a character more or less, a trailing newline, other characters."""
    return st.one_of(good.map(str.upper), good.map(lambda s: s + "\n"), good.map(lambda s: s[:-1]),
                     good.map(lambda s: s + "0"), st.text(alphabet=alphabet, max_size=40))


NEAR_MISSES = {
    "approval_id": off(APPROVAL_ID, "apr-0123456789abcdefABCDEF"),
    "decision_id": off(DECISION_ID, "dec-0123456789abcdefABCDEF"),
    "answer": st.sampled_from(["APPROVE", "approve ", "ask", "deny", "", "approved"]),
    "by": st.integers(257, 260).map(lambda n: "é" * n),
    "reason": st.integers(1025, 1028).map(lambda n: "é" * n),
}


@st.composite
def approval_values(draw: st.DrawFn) -> Any:
    """Valid values, values one change away (a field off its pattern or limit, dropped, added or of another type),
    and anything at all."""
    kind = draw(st.sampled_from(["valid", "valid", "near", "dropped", "added", "retyped", "anything"]))
    if kind == "anything":
        return draw(json_values)
    value = draw(valid_values)
    if kind == "near":
        name = draw(st.sampled_from(sorted(FIELDS)))
        value[name] = draw(NEAR_MISSES[name])
    elif kind == "dropped":
        del value[draw(st.sampled_from(sorted(FIELDS)))]
    elif kind == "added":
        value[draw(st.text(max_size=12).filter(lambda name: name not in FIELDS))] = draw(json_values)
    elif kind == "retyped":
        value[draw(st.sampled_from(sorted(FIELDS)))] = draw(json_values.filter(lambda x: not isinstance(x, str)))
    return value


@settings(max_examples=300)
@given(approval_values())
def test_the_parser_accepts_exactly_the_valid_shapes(value: Any) -> None:
    try:
        parsed = parse_value(value)
    except ApprovalValueError as exc:
        assert not valid_shape(value)
        assert "tkbox.approval value" in str(exc)  # says what was wrong
    else:
        event("accepted")
        assert valid_shape(value)
        assert (parsed.approval_id, parsed.decision_id, parsed.answer, parsed.by, parsed.reason) == (
            value["approval_id"], value["decision_id"], value["answer"], value["by"], value["reason"])


@pytest.fixture(scope="module")
def signer(tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("signer-approval-property")
    paths = SignerPaths(base / "data", base / "run")
    paths.ensure()
    loop = asyncio.new_event_loop()
    keys = load_or_create(paths.keys_dir)
    pack = load_pack("default", PolicyContext(str(paths.data_dir), str(paths.runtime_dir), os.getpid()))
    store = LogStore(paths.store_dir, keys, durable=False)
    service = SignerService(keys, store, pack)
    loop.run_until_complete(service.start())
    reply = loop.run_until_complete(service.handle("uid:0", {"method": "register_run", "request_id": new_request_id(),
                                                             "agent": {"name": "p"}}))
    yield loop, service, {"run_id": reply["run_id"], "run_token": reply["run_token"]}, set()
    store.close()
    loop.close()


@settings(max_examples=200)
@given(value=approval_values(), fresh_ask=st.sampled_from([True, True, False]), trusted=st.sampled_from([True, True, False]))
def test_through_the_signer_a_refusal_records_nothing_and_an_answer_one_record(signer, value, fresh_ask, trusted):  # type: ignore[no-untyped-def]
    loop, service, run, answered = signer

    def call(request: dict[str, Any]) -> dict[str, Any]:
        return loop.run_until_complete(service.handle("uid:0", {"request_id": new_request_id(), **run,
                                                               **request}))

    if fresh_ask and isinstance(value, dict) and "decision_id" in value:
        decided = call({"method": "decide", "tool": "Bash", "args": {"command": "sudo true"}})
        assert decided["decision"] == "ask"
        value = {**value, "decision_id": decided["decision_id"]}
    before = service.store.size
    reply = call({"method": "observe", "source": "tkbox.approval", "trust": "trusted" if trusted else "untrusted",
                  "value": value, "must_keep": True})
    answerable = trusted and valid_shape(value) and fresh_ask and value["approval_id"] not in answered
    if not answerable:
        assert "error" in reply and reply["error"]["message"]
        assert service.store.size == before
        if not trusted or not valid_shape(value):
            assert reply["error"]["code"] == "invalid_request"
        return
    event("answered")
    assert "error" not in reply, reply
    answered.add(value["approval_id"])
    assert service.store.size == before + 1
    loop.run_until_complete(service.store.drain())
    record = service.store.read_record(before)
    assert record.type == "input.observed"
    assert {name: record.event["data"][name] for name in ("approval_id", "decision_id", "answer")} == {
        name: value[name] for name in ("approval_id", "decision_id", "answer")}
