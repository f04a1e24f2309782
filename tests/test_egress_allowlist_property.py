"""Properties of the egress allowlist that hold for every list and every target, not just the examples: matching is
case-insensitive and exact on whole labels, a wildcard never matches its base, entries round-trip through their
text, a block always wins, and a change's replay lists exactly what the new list lets through."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from tkbox_daemon.egress.allowlist import (
    ATTEMPT_OUTCOMES,
    KEPT_IN_BY_LIST,
    SCHEMES,
    Allowlist,
    Attempt,
    Entry,
    EntryError,
    parse_entry,
    replay,
)
from tkbox_daemon.egress.allowlist_edit import ChangeRefused, allow, block

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
TLD = st.from_regex(r"[a-z]{2,6}", fullmatch=True)
NAMES = st.builds(lambda labels, tld: ".".join([*labels, tld]), st.lists(LABEL, min_size=1, max_size=3), TLD)
PORTS = st.sampled_from([22, 80, 443, 8080, 8443])
HOST_ENTRIES = st.builds(lambda wild, name, port: ("*." if wild else "") + name + (f":{port}" if port else ""),
                         st.booleans(), NAMES, st.none() | PORTS)
ENTRY_TEXTS = st.builds(lambda bang, text: ("!" if bang else "") + text, st.booleans(), HOST_ENTRIES)
IPS = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(lambda a: f"[{a}]"))
LISTS = st.lists(ENTRY_TEXTS | IPS, max_size=8).map(Allowlist.parse)


def _flip_case(text: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips + [False] * len(text), strict=False))


@given(NAMES, PORTS, st.sampled_from(SCHEMES), st.lists(st.booleans(), max_size=60))
def test_matching_is_case_insensitive(name, port, scheme, flips):
    listed = Allowlist.parse([name, f"{name}:{port}"])
    assert listed.match(_flip_case(name, flips), port, scheme) == listed.match(name, port, scheme)
    assert listed.match(name, port, scheme) is not None if scheme == "tcp" or port in (80, 443) else True


@given(NAMES, NAMES, st.sampled_from(["-", "", "x"]), PORTS, st.sampled_from(SCHEMES))
def test_an_entry_matches_only_its_own_labels(allowed, evil, glue, port, scheme):
    listed = Allowlist.parse([allowed, f"{allowed}:{port}"])
    assert listed.match(evil + glue + allowed, port, scheme) is None  # evil-allowed.com, evilallowed.com
    assert listed.match(f"{allowed}.{evil}", port, scheme) is None  # allowed.com.evil.com
    assume(evil != allowed)
    assert listed.match(evil, port, scheme) is None


@given(NAMES, NAMES, PORTS, st.sampled_from(SCHEMES))
def test_a_wildcard_never_matches_its_base_and_only_names_under_it(base, other, port, scheme):
    listed = Allowlist.parse([f"*.{base}", f"*.{base}:{port}"])
    assert listed.match(base, port, scheme) is None
    assert listed.match(f"x.{base}", port, scheme) is not None if scheme == "tcp" or port in (80, 443) else True
    assume(not other.endswith("." + base))
    assert listed.match(other, port, scheme) is None


@given(ENTRY_TEXTS | IPS)
def test_an_entry_round_trips_through_its_text(text):
    entry = parse_entry(text)
    assert parse_entry(entry.text) == entry and parse_entry(entry.text).text == entry.text


@given(st.text(max_size=40))
def test_any_text_is_an_entry_that_round_trips_or_refused(text):
    try:
        entry = parse_entry(text)
    except EntryError as exc:
        assert str(exc)
        return
    assert isinstance(entry, Entry) and parse_entry(entry.text) == entry and entry.text.isascii()


@given(LISTS, NAMES, PORTS, st.sampled_from(SCHEMES))
def test_a_block_always_wins(listed, name, port, scheme):
    blocked = Allowlist([*listed.entries, parse_entry("!" + name)])
    assert blocked.match(name, port, scheme) is None
    assert blocked.match(name.upper(), port, scheme) is None


@given(LISTS, HOST_ENTRIES, NAMES, PORTS, st.sampled_from(SCHEMES))
def test_after_block_nothing_it_names_is_let_through_and_nothing_else_changes(listed, host, target, port, scheme):
    after = block(listed, [host]).after
    entry = parse_entry(host)
    if entry.covers_host(target) and (entry.port is None or entry.port == port):
        assert after.match(target, port, scheme) is None
    elif listed.match(target, port, scheme) is None:
        assert after.match(target, port, scheme) is None  # a block never lets anything new through


@given(LISTS, HOST_ENTRIES, NAMES, PORTS, st.sampled_from(SCHEMES))
def test_allow_never_shuts_anything_and_lifts_every_block_on_exactly_its_names(listed, host, target, port, scheme):
    try:
        made = allow(listed, [host])
    except ChangeRefused:
        return
    entry = parse_entry(host)
    if listed.match(target, port, scheme) is not None:
        assert made.after.match(target, port, scheme) is not None
    same_names = [b for b in made.after.blocks if (b.host, b.kind, b.wildcard) == (entry.host, entry.kind,
                                                                                     entry.wildcard)]
    assert not any(b.ports & entry.ports for b in same_names)
    wider = [b for b in made.after.blocks if b not in same_names and b.covers(target, port, scheme)]
    if entry.covers(target, port, scheme) and (scheme != "tcp" or entry.port == port) and not wider:
        assert made.after.match(target, port, scheme) is not None


ATTEMPTS = st.builds(Attempt, NAMES, PORTS, st.sampled_from(SCHEMES), st.sampled_from(ATTEMPT_OUTCOMES))


@given(LISTS, LISTS, st.lists(ATTEMPTS, max_size=10))
def test_replay_lists_exactly_what_the_new_list_lets_through_that_the_old_kept_in(before, after, attempts):
    through = replay(before, after, attempts)
    assert through == [a for a in attempts if a in through]  # in order, nothing invented
    for attempt in attempts:
        expected = (attempt.outcome in KEPT_IN_BY_LIST and before.admits(attempt) is None
                    and after.admits(attempt) is not None)
        assert (attempt in through) == expected
