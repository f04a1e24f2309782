"""docs/policy.md describes every rule of the default pack (and the engine's own ids)."""

from __future__ import annotations

import re
from pathlib import Path

from tkbox_daemon.policy import PolicyContext, load_pack
from tkbox_daemon.policy.schema import ENGINE_RULE_IDS

DOC = (Path(__file__).resolve().parent.parent / "docs" / "policy.md").read_text(encoding="utf-8")


def test_every_default_rule_id_is_documented():
    pack = load_pack("default", PolicyContext("/srv/tkbox/data", "/run/tkbox", None))
    documented = set(re.findall(r"^\| (TK-[A-Z0-9-]+) \|", DOC, flags=re.M))
    missing = sorted(rule.id for rule in pack.rules if rule.id not in documented)
    assert not missing, f"add these rule ids to the default pack table in docs/policy.md: {missing}"


def test_every_engine_id_is_documented():
    missing = sorted(rule_id for rule_id in ENGINE_RULE_IDS if f"| {rule_id} |" not in DOC)
    assert not missing, f"document these engine ids in docs/policy.md: {missing}"


def test_docs_name_no_rule_the_pack_lacks():
    pack = load_pack("default", PolicyContext("/srv/tkbox/data", "/run/tkbox", None))
    known = {rule.id for rule in pack.rules} | set(ENGINE_RULE_IDS)
    stale = sorted(set(re.findall(r"^\| (TK-[A-Z0-9-]+) \|", DOC, flags=re.M)) - known)
    assert not stale, f"docs/policy.md describes rules the default pack does not have: {stale}"
