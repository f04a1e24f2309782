"""The committed table of hostile connection targets (tests/corpus/egress_targets.json): each row's target goes
through the parse-then-check pipeline the proxy runs, and must be refused by the rule the row names, or accepted
as exactly the host, port and path it names.

Forms: ``connect`` (a CONNECT target), ``absolute`` (an http:// URL and its Host headers), ``decision`` (a
WebFetch url), ``resolved`` (a name and every address it resolved to; ``dial`` is the address to dial).
"""

from __future__ import annotations

from collections import Counter
from ipaddress import ip_address
from pathlib import Path

import pytest

from tkbox_daemon.egress.ranges import classify
from tkbox_daemon.egress.refusals import RULES, EgressRefused
from tkbox_daemon.egress.resolved import check_resolved
from tkbox_daemon.egress.target import Target, parse_absolute, parse_connect, parse_decision_url
from tkbox_daemon.strictjson import loads

TABLE = Path(__file__).resolve().parent / "corpus" / "egress_targets.json"
ROWS = loads(TABLE.read_bytes(), max_bytes=1 << 20)["rows"]


def _admit(row: dict) -> Target:
    """Parse the row's target; an IP literal is then checked as written, as the proxy does before the signer."""
    if row["form"] == "connect":
        target = parse_connect(row["input"])
    elif row["form"] == "absolute":
        target = parse_absolute(row["input"], row["host_headers"])
    else:
        target = parse_decision_url(row["input"])
    if not isinstance(target.host, str):
        refusal = classify(target.host)
        if refusal is not None:
            raise refusal.error()
    return target


def _outcome(row: dict) -> dict:
    try:
        if row["form"] == "resolved":
            return {"expect": "accept", "dial": str(check_resolved(row["input"], row["addresses"]))}
        target = _admit(row)
    except EgressRefused as refused:
        return {"expect": "refuse", "rule": refused.rule}
    outcome = {"expect": "accept", "host": target.host_text, "port": target.port}
    if row["form"] == "absolute":
        outcome["path"] = target.path
    return outcome


def _expected(row: dict) -> dict:
    keys = {"refuse": ["rule"], "accept": ["dial"] if row["form"] == "resolved" else ["host", "port"]}[row["expect"]]
    if row["expect"] == "accept" and row["form"] == "absolute":
        keys = [*keys, "path"]
    return {"expect": row["expect"], **{key: row[key] for key in keys}}


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}-{row['form']}-{row['note'][:40]}" for i, row in enumerate(ROWS)])
def test_each_hostile_target_gets_the_outcome_the_table_names(row):
    assert _outcome(row) == _expected(row)


def test_the_table_is_large_varied_and_names_only_real_rules():
    assert len(ROWS) >= 120
    forms = Counter(row["form"] for row in ROWS)
    assert forms["connect"] >= 60 and forms["absolute"] >= 20 and forms["resolved"] >= 10 and forms["decision"] >= 5
    rules = {row["rule"] for row in ROWS if row["expect"] == "refuse"}
    assert rules <= set(RULES)
    assert len(rules) >= 25, "the table exercises most rules"
    assert all(row["note"] for row in ROWS), "every row says what trick it is"
    assert len({(row["form"], row["input"], str(row.get("addresses")), str(row.get("host_headers")))
                for row in ROWS}) == len(ROWS), "no row is repeated"


def test_every_address_row_the_table_accepts_is_public_by_pythons_reading_too():
    """A sanity check on the table itself: an accepted literal is one ``is_global`` also calls global."""
    literals = 0
    for row in ROWS:
        if row["expect"] == "accept" and row["form"] != "resolved":
            try:
                address = ip_address(row["host"].strip("[]"))
            except ValueError:
                continue
            literals += 1
            assert address.is_global, row
    assert literals >= 5
