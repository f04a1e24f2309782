"""The egress decision order as a state machine, driven without sockets: what is resolved when, what is refused
before the signer, what waits for a person, and that only a checked address is ever dialled."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.egress.decision import AskSigner, DecisionFlow, Dial, Hold, Refuse, Resolve, SignerVerdict

PUBLIC = ipaddress.ip_address("11.0.0.7")
PRIVATE = ipaddress.ip_address("10.0.0.7")
ALLOW, ASK, DENY = SignerVerdict("allow"), SignerVerdict("ask", ("TK-X",), "why"), SignerVerdict("deny", ("TK-D",), "no")


def check(address):
    return "is a private address (RFC 1918)" if address.is_private else None


def flow(*, listed=True, literal=None, inspect_all=False, host="pypi.org", port=443):
    return DecisionFlow(host=host, port=port, url=f"https://{host}:{port}", literal=literal, listed=listed,
                        check=check, inspect_all=inspect_all)


def test_a_listed_name_is_resolved_checked_decided_then_dialled_at_the_checked_address():
    decision = flow()
    assert decision.start() == Resolve("pypi.org", 443)
    assert decision.resolved([PUBLIC]) == AskSigner("https://pypi.org:443")
    assert decision.decided(ALLOW) == Dial(PUBLIC, 443)


def test_a_listed_name_with_one_private_answer_is_refused_before_the_signer():
    decision = flow()
    decision.start()
    step = decision.resolved([PUBLIC, PRIVATE])
    assert isinstance(step, Refuse) and step.before_signer and "10.0.0.7" in step.reason


def test_an_ip_literal_is_checked_before_the_signer_and_never_resolved():
    assert isinstance(flow(listed=False, literal=PRIVATE, host="10.0.0.7").start(), Refuse)
    decision = flow(listed=True, literal=PUBLIC, host="11.0.0.7")
    assert decision.start() == AskSigner("https://11.0.0.7:443")
    assert decision.decided(ALLOW) == Dial(PUBLIC, 443)


def test_an_ip_literal_off_the_list_is_held_like_a_name_and_dialled_only_once_approved():
    decision = flow(listed=False, literal=PUBLIC, host="11.0.0.7")
    assert decision.start() == AskSigner("https://11.0.0.7:443")
    assert decision.decided(ASK) == Hold("off_list")
    assert decision.answered(True) == Dial(PUBLIC, 443)


def test_an_off_list_name_is_not_resolved_until_the_signer_and_a_person_allow_it():
    decision = flow(listed=False)
    assert decision.start() == AskSigner("https://pypi.org:443")
    assert decision.decided(ASK) == Hold("off_list")
    assert decision.answered(True) == Resolve("pypi.org", 443)
    assert decision.resolved([PUBLIC]) == Dial(PUBLIC, 443)


def test_an_off_list_name_in_an_inspect_all_box_is_refused_at_once():
    decision = flow(listed=False, inspect_all=True)
    decision.start()
    step = decision.decided(ASK)
    assert isinstance(step, Refuse) and step.rule == "egress-off-list" and "tkbox allow BOX pypi.org" in step.hint


def test_an_off_list_name_the_policy_allows_without_asking_is_refused():
    decision = flow(listed=False)
    decision.start()
    step = decision.decided(ALLOW)
    assert isinstance(step, Refuse) and "without asking" in step.reason and "TK-A008" in step.hint


def test_the_policys_ask_holds_even_a_listed_host_and_a_rejection_refuses():
    decision = flow()
    decision.start()
    decision.resolved([PUBLIC])
    assert decision.decided(ASK) == Hold("policy")
    step = decision.answered(False, "rejected by uid 0")
    assert isinstance(step, Refuse) and "rejected by uid 0" in step.reason


def test_a_denial_names_the_rules():
    decision = flow(listed=False)
    decision.start()
    step = decision.decided(DENY)
    assert isinstance(step, Refuse) and "TK-D" in step.reason and not step.before_signer


def test_answers_out_of_order_are_a_bug_not_a_decision():
    decision = flow()
    with pytest.raises(RuntimeError):
        decision.decided(ALLOW)


ADDRESSES = st.lists(st.sampled_from([PUBLIC, PRIVATE, ipaddress.ip_address("11.0.0.8")]), max_size=3)


@given(st.booleans(), st.booleans(), st.booleans(), st.sampled_from([None, PUBLIC, PRIVATE]),
       st.lists(st.one_of(ADDRESSES.map(lambda a: ("resolved", a)),
                          st.sampled_from([ALLOW, ASK, DENY]).map(lambda v: ("decided", v)),
                          st.booleans().map(lambda b: ("answered", b))), max_size=6))
def test_only_a_checked_address_is_dialled_and_only_after_the_signer_and_any_hold(listed, inspect_all, _, literal,
                                                                                   answers):
    decision = flow(listed=listed, literal=literal, inspect_all=inspect_all)
    step = decision.start()
    resolved_before_signer = isinstance(step, Resolve)
    checked: set = {literal} if literal is not None else set()
    verdict, held, approved = None, False, False
    for kind, value in answers:
        if isinstance(step, Dial | Refuse):
            break
        wanted = {Resolve: "resolved", AskSigner: "decided", Hold: "answered"}[type(step)]
        if kind != wanted:
            continue
        if kind == "resolved":
            if not value:
                value = [PUBLIC]
            if all(check(address) is None for address in value):
                checked.add(value[0])
        elif kind == "decided":
            verdict = value
        else:
            approved = value
        if isinstance(step, Resolve) and verdict is None and not listed:
            pytest.fail("an off-list name was resolved before the signer was asked")
        held = held or isinstance(step, Hold)
        step = getattr(decision, kind)(value)
    if isinstance(step, Dial):
        assert step.address in checked and check(step.address) is None
        assert verdict is not None and verdict.decision != "deny"
        assert (not held) or approved
        assert listed or (held and approved and verdict.decision == "ask")
    assert not (resolved_before_signer and not listed)
