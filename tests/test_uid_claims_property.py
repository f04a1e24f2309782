"""Properties of the uid claim format: a claim reads back as it was written, and anything else a claim file may hold
(a changed field, a missing or extra one, another uid, torn bytes) is refused with ``ClaimError`` and nothing else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box.uid_claims import Claim, ClaimError, ClaimHolder, encode_claim, parse_claim

printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FFF, blacklist_categories=("Cs", "Zl", "Zp",
                                                                                                  "Cc", "Cf", "Co")),
                    min_size=1, max_size=80).filter(str.isprintable)
holders = st.builds(ClaimHolder, daemon=printable, boot=st.one_of(st.just(""), st.uuids().map(str)),
                    pid=st.integers(1, 1 << 22), start=st.integers(0, 2**53 - 1),
                    records=st.one_of(st.none(), printable.map(lambda text: "/" + text)))
claims = st.builds(Claim, uid=st.integers(1, 0xFFFF_FFFE), box=st.from_regex(r"[a-z0-9][a-z0-9_-]{0,62}",
                                                                             fullmatch=True), holder=holders)


@given(claims)
def test_a_claim_reads_back_as_it_was_written(claim):
    assert parse_claim(encode_claim(claim), uid=claim.uid) == claim


@given(claims, st.integers(1, 0xFFFF_FFFE))
def test_a_claim_is_refused_for_a_file_of_another_uid(claim, other):
    if other == claim.uid:
        return
    with pytest.raises(ClaimError, match="uid: the claim says"):
        parse_claim(encode_claim(claim), uid=other)


BAD_VALUES = {
    "version": [2, "1", True, None], "uid": [0, "5", 1.5, None, 0xFFFF_FFFF], "box": ["", "A", "../x", 5, "a b"],
    "daemon": ["", "a\nb", 7, None, "x" * 4097], "boot": ["nope", 1, None], "pid": [0, -1, (1 << 22) + 1, "1", True],
    "start": [-1, "0", None, False], "records": ["relative", "", 3],
}


@given(claims, st.sampled_from(sorted(BAD_VALUES)), st.data())
def test_any_field_out_of_its_bounds_is_refused(claim, field, data):
    value = json.loads(encode_claim(claim))
    value[field] = data.draw(st.sampled_from(BAD_VALUES[field]))
    with pytest.raises(ClaimError):
        parse_claim(json.dumps(value).encode(), uid=claim.uid)


@given(claims, st.sampled_from(["version", "uid", "box", "daemon", "boot", "pid", "start", "records"]))
def test_a_missing_or_extra_field_is_refused(claim, field):
    value = json.loads(encode_claim(claim))
    missing = {key: item for key, item in value.items() if key != field}
    with pytest.raises(ClaimError, match="fields"):
        parse_claim(json.dumps(missing).encode(), uid=claim.uid)
    with pytest.raises(ClaimError, match="fields"):
        parse_claim(json.dumps({**value, "extra": 1}).encode(), uid=claim.uid)


@given(claims, st.data())
def test_torn_bytes_are_refused_never_misread(claim, data):
    whole = encode_claim(claim)
    cut = data.draw(st.integers(0, len(whole) - 3))  # the last bytes are "}\n": anything shorter is torn
    with pytest.raises(ClaimError):
        parse_claim(whole[:cut], uid=claim.uid)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_a_claim_that_reads_back_or_a_claim_error(raw):
    try:
        claim = parse_claim(raw, uid=100_000)
    except ClaimError:
        return
    assert parse_claim(encode_claim(claim), uid=100_000) == claim
