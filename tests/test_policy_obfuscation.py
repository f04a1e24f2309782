"""The obfuscation table (tests/policy_cases/obfuscation.yaml): an obfuscated command gets the same verdict as
its plain twin under the default pack - never allow for the dangerous ones, still allow for the benign ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tkbox_daemon.policy import PolicyContext, evaluate, load_pack

CASES = yaml.safe_load((Path(__file__).parent / "policy_cases" / "obfuscation.yaml").read_text(encoding="utf-8"))
CONTEXT = PolicyContext(signer_data_dir="/home/agent/.local/share/tkbox", signer_runtime_dir="/run/user/1000/tkbox",
                        signer_pid=4242)


@pytest.fixture(scope="module")
def pack():
    return load_pack("default", CONTEXT)


def test_the_table_is_big_enough():
    assert len(CASES["dangerous"]) >= 40
    assert len(CASES["benign"]) >= 5


@pytest.mark.parametrize("case", CASES["dangerous"], ids=lambda c: c.get("note", c["obfuscated"]))
def test_obfuscated_twin_gets_the_plain_verdict_and_it_is_not_allow(pack, case):
    plain = evaluate(pack, "Bash", {"command": case["plain"]})
    hidden = evaluate(pack, "Bash", {"command": case["obfuscated"]})
    assert plain.verdict != "allow", case
    assert hidden.verdict == plain.verdict, (case, hidden)
    # the rule that decided the plain command also fires on the obfuscated one
    assert plain.rule_ids[0] in hidden.rule_ids, (case, plain.rule_ids, hidden.rule_ids)


@pytest.mark.parametrize("case", CASES["benign"], ids=lambda c: c["obfuscated"])
def test_benign_obfuscated_twin_stays_allow(pack, case):
    assert evaluate(pack, "Bash", {"command": case["plain"]}).verdict == "allow"
    assert evaluate(pack, "Bash", {"command": case["obfuscated"]}).verdict == "allow"
