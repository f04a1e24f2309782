"""Pack loading: every schema error names the file, the line and the key; placeholders, extends and the hash."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tkbox_daemon.policy import PolicyContext, PolicyError, PolicyPack, evaluate, load_pack

CONTEXT = PolicyContext(signer_data_dir="/srv/tk+box/data", signer_runtime_dir="/run/tkbox-rt", signer_pid=777)

GOOD = """\
version: 1
description: test pack
tools:
  Bash: shell
unknown_tools: deny
deny:
  - id: TK-X001
    class: shell
    pattern: 'rm\\s+-rf'
    reason: not allowed
    hint: do not
"""


def write(tmp_path: Path, text: str, name: str = "pack.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error_of(path: Path) -> PolicyError:
    with pytest.raises(PolicyError) as caught:
        load_pack(str(path), CONTEXT)
    return caught.value


def test_good_pack_loads(tmp_path):
    pack = load_pack(str(write(tmp_path, GOOD)), CONTEXT)
    assert isinstance(pack, PolicyPack)
    assert pack.name == "pack"
    assert pack.unknown_tools == "deny"
    assert evaluate(pack, "Bash", {"command": "rm -rf x"}).rule_ids == ("TK-X001",)
    assert evaluate(pack, "Nope", {}).verdict == "deny"


@pytest.mark.parametrize(("text", "line", "words"), [
    # an unknown top-level key
    ("version: 1\nflags: []\n", 2, ["unknown key 'flags'", "flags"]),
    # an unknown rule key
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\n    severity: high\n", 5, ["unknown key 'severity'", "deny[0].severity"]),
    # wrong types
    ("version: 1\ndescription: [a]\n", 2, ["must be a string", "description"]),
    ("version: 1\ndeny: {id: x}\n", 2, ["must be a list", "deny"]),
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: 12\n", 4, ["must be a string", "deny[0].pattern"]),
    ("version: 1\ntools:\n  Bash: [shell, fs]\n", 3, ["exactly one class", "tools.Bash"]),
    ("version: 1\ntools:\n  Bash: shel\n", 3, ["unknown value 'shel'", "tools.Bash"]),
    ("version: 1\nunknown_tools: maybe\n", 2, ["unknown value 'maybe'", "unknown_tools"]),
    ("version: 2\n", 1, ["unsupported version 2", "version"]),
    # missing required keys
    ("description: x\n", 1, ["missing required key 'version'"]),
    ("version: 1\nask:\n  - pattern: a\n", 3, ["missing required key 'id'", "ask[0]"]),
    ("version: 1\nask:\n  - id: TK-X1\n", 3, ["missing required key 'pattern'", "ask[0]"]),
    # duplicate rule ids (across verdict lists too)
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\nflag:\n  - id: TK-X1\n    pattern: b\n", 6,
     ["duplicate rule id 'TK-X1'", "first at line 3"]),
    # bad regexes, in pattern and in unless
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: 'a(b'\n", 4, ["bad regex", "TK-X1.pattern", "Python re"]),
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\n    unless: '[z'\n", 5, ["bad regex", "TK-X1.unless"]),
    # duplicate YAML mapping keys, anchors, aliases, merge keys
    ("version: 1\nversion: 1\n", 2, ["duplicate key 'version'", "first at line 1"]),
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\n    pattern: b\n", 5, ["duplicate key 'pattern'"]),
    ("version: 1\ndescription: &d text\n", 2, ["anchor &d is not allowed"]),
    ("version: 1\ntools: {Bash: shell}\ndeny:\n  - &r {id: TK-X1, pattern: a}\n", 4, ["anchor &r"]),
    ("version: 1\ndeny:\n  - {id: TK-X1, pattern: a}\nask:\n  - <<: {id: TK-X2}\n    pattern: b\n", 5,
     ["merge keys"]),
    # broken YAML, bad ids, unknown placeholders, an empty file
    ("version: 1\ndeny: [\n", 3, ["invalid YAML"]),
    ("version: 1\ndeny:\n  - id: d007\n    pattern: a\n", 3, ["bad rule id 'd007'", "like TK-D007"]),
    ("version: 1\ndeny:\n  - id: TK-ARGS-INVALID\n    pattern: a\n", 3, ["reserved for the engine"]),
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: '{signer_datadir}/x'\n", 4, ["unknown placeholder {signer_datadir}"]),
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\n    class: [shell, files]\n", 5, ["unknown value 'files'"]),
    ("version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\n    field: 'a b'\n", 5, ["bad field name"]),
    ("", 1, ["the pack is empty"]),
    ("version: 1\nextends: [no-such-pack]\n", 2, ["no built-in pack named 'no-such-pack'", "extends"]),
])
def test_schema_errors_name_file_line_and_key(tmp_path, text, line, words):
    path = write(tmp_path, text)
    error = error_of(path)
    message = str(error)
    assert message.startswith(f"{path}:{line}:"), message
    assert error.path == str(path) and error.line == line
    for word in words:
        assert word in message, message
    assert error.action, "every error says what to do"


def test_alias_is_rejected_with_its_line(tmp_path):
    path = write(tmp_path, "version: 1\ndescription: &d text\npatterns:\n  x: *d\n")
    assert "anchor" in str(error_of(path))  # the anchor is reported first, at line 2
    path = write(tmp_path, "version: 1\npatterns:\n  x: a\n  y: *d\n")
    error = error_of(path)
    assert error.line == 4 and ("alias" in str(error) or "invalid YAML" in str(error))


def test_duplicate_rule_id_across_extends_names_both_files(tmp_path):
    write(tmp_path, "version: 1\ndeny:\n  - id: TK-X1\n    pattern: a\n", "base.yaml")
    child = write(tmp_path, "version: 1\nextends: [./base.yaml]\nask:\n  - id: TK-X1\n    pattern: b\n", "child.yaml")
    message = str(error_of(child))
    assert f"{child}:4" in message and "base.yaml:3" in message


def test_extends_cycle_is_an_error(tmp_path):
    write(tmp_path, "version: 1\nextends: [./b.yaml]\n", "a.yaml")
    b = write(tmp_path, "version: 1\nextends: [./a.yaml]\n", "b.yaml")
    assert "cycle" in str(error_of(b))


def test_extends_merges_tools_rules_and_unknown_tools(tmp_path):
    write(tmp_path, "version: 1\nunknown_tools: deny\ntools:\n  Zap: shell\ndeny:\n  - id: TK-X1\n    pattern: boom\n",
          "base.yaml")
    child = write(tmp_path, "version: 1\nextends: [./base.yaml]\nunknown_tools: ask\nflag:\n  - id: TK-X2\n    "
                  "pattern: ls\n", "child.yaml")
    pack = load_pack(str(child), CONTEXT)
    assert pack.packs == ("base", "child")
    assert pack.unknown_tools == "ask"
    verdict = evaluate(pack, "Zap", {"command": "ls; boom"})
    assert verdict.tool_class == "shell" and verdict.rule_ids == ("TK-X1", "TK-X2")


def test_default_pack_extends_coding():
    pack = load_pack("default", CONTEXT)
    assert pack.packs == ("coding", "default")
    assert pack.unknown_tools == "flag"
    assert {"TK-D007", "TK-D013", "TK-F002"} <= {rule.id for rule in pack.rules}


def test_unknown_pack_name_and_missing_file():
    with pytest.raises(PolicyError, match="no built-in pack named 'nope'.*default"):
        load_pack("nope", CONTEXT)
    with pytest.raises(PolicyError, match="does not exist"):
        load_pack("/no/such/pack.yaml", CONTEXT)


def test_context_placeholders_are_escaped_and_a_missing_pid_never_matches(tmp_path):
    path = write(tmp_path, """\
        version: 1
        deny:
          - id: TK-X1
            pattern: '{signer_data_dir}|{extra_protected_paths}'
          - id: TK-X2
            pattern: '{cmd}kill\\s+{signer_pid}{end}'
        """)
    pack = load_pack(str(path), PolicyContext("/srv/tk+box/data", "/run/x", 777, ("/keys/a.b",)))
    decide = lambda c: evaluate(pack, "Bash", {"command": c}).rule_ids  # noqa: E731
    assert decide("cat /srv/tk+box/data/key") == ("TK-X1",)
    assert decide("cat /srv/tkkkbox/data/key") == ()  # "+" was escaped, not a regex quantifier
    assert decide("cat /keys/a.b") == ("TK-X1",) and decide("cat /keys/aXb") == ()
    assert decide("kill 777") == ("TK-X2",) and decide("kill 7777") == ()
    no_pid = load_pack(str(path), PolicyContext("/srv/d", "/run/x", None))
    assert evaluate(no_pid, "Bash", {"command": "kill 777"}).verdict == "allow"
    assert evaluate(no_pid, "Bash", {"command": "cat /keys/a.b"}).verdict == "allow"


@pytest.mark.parametrize("context", [
    PolicyContext("relative/dir", "/run/x", None),
    PolicyContext("/", "/run/x", None),
    PolicyContext("/d", "", None),
    PolicyContext("/d", "/r", -1),
    PolicyContext("/d", "/r", None, ("rel",)),
])
def test_bad_context_is_a_policy_error(context):
    with pytest.raises(PolicyError, match="PolicyContext"):
        load_pack("default", context)


def test_pack_snapshot_and_hash():
    pack = load_pack("default", CONTEXT)
    snapshot = pack.snapshot()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", pack.policy_hash)
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["name"] == "default" and snapshot["unknown_tools"] == "flag"
    assert any("/srv/tk\\+box/data" in rule["pattern"] for rule in snapshot["rules"])
    snapshot["rules"].clear()  # a copy: the pack is not changed
    assert pack.snapshot()["rules"]
    assert load_pack("default", CONTEXT).policy_hash == pack.policy_hash
    other = load_pack("default", PolicyContext("/srv/other", "/run/tkbox-rt", 777))
    assert other.policy_hash != pack.policy_hash


def test_yaml_python_tags_are_not_constructed(tmp_path):
    path = write(tmp_path, "version: 1\ndescription: !!python/object/apply:os.system ['true']\n")
    assert "invalid YAML" in str(error_of(path)) or "could not determine" in str(error_of(path))


def test_default_context_follows_the_signer_paths(monkeypatch):
    from tkbox_daemon.policy.context import default_context

    monkeypatch.setenv("TKBOX_SIGNER_DATA_DIR", "/srv/signer-data")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    monkeypatch.delenv("TKBOX_SIGNER_RUNTIME_DIR", raising=False)
    context = default_context()
    assert (context.signer_data_dir, context.signer_runtime_dir, context.signer_pid) == (
        "/srv/signer-data", "/run/user/1234/tkbox-signer", None)
    monkeypatch.delenv("TKBOX_SIGNER_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", "/home/x/.local/share")
    assert default_context().signer_data_dir == "/home/x/.local/share/tkbox/signer"
    pack = load_pack("default")  # no context: the defaults above
    assert evaluate(pack, "Bash", {"command": "ls /home/x/.local/share/tkbox/signer"}).rule_ids == ("TK-D007",)
