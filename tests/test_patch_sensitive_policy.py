"""The sensitive-file table and the policy agree where they overlap: every file the coding pack's ``{steering}``
and ``{credential}`` patterns and rule TK-F008 catch, and every credential file of daemon/rules.py, is sensitive.

Each alternative of those regexes has hand-picked sample paths (checked through the real policy engine) and is
also fed to Hypothesis' ``from_regex``, so a new alternative in the pack that the table misses fails here.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkbox_daemon import rules
from tkbox_daemon.patch.sensitive import sensitive_reason
from tkbox_daemon.policy import PolicyContext, evaluate, load_pack

PACK_FILE = Path(__file__).resolve().parents[1] / "daemon" / "policy" / "packs" / "coding.yaml"
PACK_YAML = yaml.safe_load(PACK_FILE.read_text(encoding="utf-8"))
PARAMS: dict[str, str] = PACK_YAML["patterns"]
F008 = next(rule["pattern"] for rule in PACK_YAML["flag"] if rule["id"] == "TK-F008")

# Alternatives that name no file a checkout can hold, and why.
NOT_IN_A_CHECKOUT = {
    "/etc/(?:g?shadow|sudoers)(?![\\w.-])": "an absolute system path; checkout paths are relative",
}


def _alternatives(group: str) -> list[str]:
    """The top-level alternatives of ``(?:a|b|...)``."""
    assert group.startswith("(?:") and group.endswith(")"), group
    body, found, depth, in_class, start, index = group[3:-1], [], 0, False, 0, 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            found.append(body[start:index])
            start = index + 1
        index += 1
    assert depth == 0 and not in_class, group
    return [*found, body[start:]]


def _expanded(fragment: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda match: PARAMS[match.group(1)], fragment)


def _f008_group() -> str:
    match = re.fullmatch(r"\(\?<!\[\\w\.-\]\)(\(\?:.*\))\$", F008)
    assert match, F008
    return match.group(1)


ALTERNATIVES: list[tuple[str, str]] = (
    [("steering", alternative) for alternative in _alternatives(PARAMS["steering"])]
    + [("credential", alternative) for alternative in _alternatives(PARAMS["credential"])]
    + [("TK-F008", alternative) for alternative in _alternatives(_f008_group())]
)

# (rule the real pack answers with, sample paths as an agent's Write would name them)
SAMPLES: dict[str, tuple[str, list[str]]] = {
    "TK-A002": ("ask", [
        ".github/workflows/release.yml", ".github/actions/setup/action.yml", ".gitlab-ci.yml", ".gitlab-ci.yaml",
        ".gitlab/ci/build.yml", ".circleci/config.yml", "Jenkinsfile", "azure-pipelines.yml", ".travis.yml",
        "bitbucket-pipelines.yml", ".buildkite/pipeline.yml", ".drone.yml", ".woodpecker.yml",
        ".woodpecker/ci.yaml", ".git/hooks/pre-push", ".git/config", ".gitattributes", ".gitmodules",
        ".husky/pre-commit", ".pre-commit-config.yaml", ".pre-commit-hooks.yaml", "lefthook.yml", ".envrc",
        ".vscode/tasks.json", ".vscode/launch.json", ".vscode/settings.json", ".devcontainer/devcontainer.json",
        ".devcontainer.json", ".idea/workspace.xml", ".idea/runConfigurations/App.xml", "CLAUDE.md",
        "CLAUDE.local.md", "AGENTS.md", "GEMINI.md", ".claude/settings.json", ".cursorrules", ".cursor/mcp.json",
        ".windsurfrules", ".clinerules", ".github/copilot-instructions.md", ".mcp.json", ".codex/config.toml",
        ".aider.conf.yml", ".continue/config.json", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout",
        ".profile", ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".config/fish/config.fish",
        ".ssh/authorized_keys", ".ssh/config", ".ssh/rc", ".ssh/environment", ".config/autostart/x.desktop",
        ".config/systemd/user/x.service"]),
    "TK-A004": ("ask", [
        ".ssh/id_rsa", ".ssh/host_key", ".ssh/identity", ".ssh", ".ssh/*", ".aws/credentials", ".aws/config", ".aws",
        ".config/gcloud/credentials.db", ".config/gcloud/access_tokens.db",
        ".config/gcloud/application_default_credentials.json", ".config/gcloud/legacy_credentials",
        ".azure/accessTokens.json", ".azure/msal_token_cache.bin", ".kube/config", ".docker/config.json",
        ".git-credentials", ".config/gh/hosts.yml", ".gnupg/pubring.kbx", ".gnupg", ".vault-token",
        ".terraform.d/credentials.tfrc.json", ".gem/credentials", ".cargo/credentials", ".cargo/credentials.toml",
        ".pgpass", ".my.cnf", "_netrc", ".netrc", ".npmrc", ".pypirc", ".yarnrc.yml", ".env", ".env.local",
        ".env.production.local", "server.pem", "tls.key", "client.p12", "client.pfx", "store.jks", "app.keystore",
        "putty.ppk", "id_rsa", "id_ed25519_sk", "id_ecdsa"]),
    "TK-F008": ("flag", [
        "Makefile", "GNUmakefile", "makefile", "rules.mk", "justfile", "Justfile", "Taskfile.yml", "Taskfile.yaml",
        "Rakefile", "build.gradle", "build.gradle.kts", "setup.py", "conftest.py", "noxfile.py", "tox.ini",
        "package.json"]),
}


@pytest.fixture(scope="module")
def pack():
    return load_pack("default", PolicyContext("/srv/tkbox/data", "/run/tkbox", None))


@pytest.mark.parametrize(("rule_id", "path"),
                         [(rule_id, path) for rule_id, (_, paths) in SAMPLES.items() for path in paths])
@pytest.mark.parametrize("directory", ["", "work/sub/"])
def test_what_the_policy_asks_or_flags_for_a_write_is_sensitive(pack, rule_id, path, directory):
    verdict = evaluate(pack, "Write", {"file_path": "/" + directory + path, "content": "x"})
    assert rule_id in verdict.rule_ids, (path, verdict)
    assert sensitive_reason(directory + path) is not None, path


@pytest.mark.parametrize(("param", "alternative"), ALTERNATIVES)
def test_every_alternative_of_the_policy_patterns_has_a_sample(param, alternative):
    if alternative in NOT_IN_A_CHECKOUT:
        return
    compiled = re.compile(_expanded(alternative))
    samples = [path for _, paths in SAMPLES.values() for path in paths]
    assert any(compiled.fullmatch(path) or compiled.search("/" + path) for path in samples), (
        f"{param} alternative {alternative!r} has no sample path in SAMPLES: add one (and, if it is not "
        f"sensitive yet, an entry to daemon/patch/sensitive.py)")


@pytest.mark.parametrize(("param", "alternative"),
                         [item for item in ALTERNATIVES if item[1] not in NOT_IN_A_CHECKOUT])
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_anything_an_alternative_matches_is_sensitive(param, alternative, data):
    matched = data.draw(st.from_regex(_expanded(alternative), fullmatch=True).filter(lambda text: "\n" not in text))
    directory = data.draw(st.sampled_from(["", "sub/", "a/b/"]))
    assert sensitive_reason(directory + matched) is not None, (param, alternative, matched)


def _rule_instance(pattern: str) -> st.SearchStrategy[str]:
    """Paths ``rules.CREDENTIAL_FILE_PATTERNS``' ``pattern`` matches: each ``*`` filled with a name."""
    filler = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=8)
    pieces = pattern.split("*")
    return st.lists(filler, min_size=len(pieces) - 1, max_size=len(pieces) - 1).map(
        lambda fills: "".join(piece + fill for piece, fill in zip(pieces, [*fills, ""], strict=True)))


_NAME = st.text(alphabet=string.ascii_lowercase + string.digits + "_-", min_size=1, max_size=8)


@given(st.sampled_from(rules.CREDENTIAL_FILE_PATTERNS).flatmap(_rule_instance),
       st.lists(_NAME, max_size=2), st.lists(_NAME, max_size=2))
def test_every_credential_file_of_the_rules_is_sensitive(instance, above, below):
    path = "/".join([*above, instance, *below])
    assert rules.is_credential_file(path)
    assert sensitive_reason(path) is not None, path


@given(st.lists(st.one_of(_NAME, st.sampled_from(rules.CREDENTIAL_FILE_PATTERNS).flatmap(_rule_instance)),
                min_size=1, max_size=4))
def test_sensitive_covers_is_credential_file(parts):
    path = "/".join(parts)
    if rules.is_credential_file(path):
        assert sensitive_reason(path) is not None, path
