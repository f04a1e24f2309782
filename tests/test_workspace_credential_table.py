"""The credential files a box's workspace never holds, pinned from the docs rather than from the code's own rule.

The table below is copied from docs/apply.md (the "credentials" rows of the sensitive files, which the workspace
base copy leaves out: docs/box-isolation.md): each documented name with files it covers, and near misses that no
page calls a credential file, which must be copied. As those docs say, a name matches in any letter case and in
any directory. Both the rule (``is_credential_file``) and a real base copy are checked against it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tkbox_daemon.box.workspace import build_base
from tkbox_daemon.rules import is_credential_file

DOCS = Path(__file__).resolve().parents[1] / "docs"

# docs/apply.md, family "credentials": each documented pattern and files it names.
DOCUMENTED_CREDENTIALS: dict[str, tuple[str, ...]] = {
    ".env": (".env",),
    ".netrc": (".netrc",),
    "_netrc": ("_netrc",),
    ".git-credentials": (".git-credentials",),
    ".dockercfg": (".dockercfg",),
    "credentials.json": ("credentials.json",),
    ".terraformrc": (".terraformrc",),
    "terraform.tfvars": ("terraform.tfvars",),
    ".vault-token": (".vault-token",),
    ".htpasswd": (".htpasswd",),
    ".pgpass": (".pgpass",),
    ".my.cnf": (".my.cnf",),
    ".env.*": (".env.local", ".env.production", ".env.example"),
    "*.env": ("prod.env", "database.env"),
    "id_*": ("id_rsa", "id_ed25519", "id_ecdsa_sk"),
    "service-account*.json": ("service-account.json", "service-account-prod.json"),
    "*.pem": ("deploy.pem",),
    "*.key": ("server.key",),
    "*.p12": ("client.p12",),
    "*.pfx": ("client.pfx",),
    "*.keystore": ("release.keystore",),
    "*.jks": ("trust.jks",),
    "*.ppk": ("putty.ppk",),
    ".ssh/": (".ssh/config", ".ssh/authorized_keys", ".ssh/keys/deploy"),
    ".gnupg/": (".gnupg/pubring.kbx", ".gnupg/private-keys-v1.d/A1.key"),
    ".aws/": (".aws/credentials", ".aws/config", ".aws/sso/cache/token.json"),
    ".azure/": (".azure/msal_token_cache.json",),
    ".config/gcloud/": (".config/gcloud/credentials.db", ".config/gcloud/legacy_credentials/a/adc.json"),
    ".kube/": (".kube/config", ".kube/cache/discovery/x.json"),
    ".docker/": (".docker/config.json",),
    ".config/gh/": (".config/gh/hosts.yml",),
    ".gem/credentials": (".gem/credentials",),
    ".cargo/credentials": (".cargo/credentials",),
    ".cargo/credentials.toml": (".cargo/credentials.toml",),
    ".terraform.d/credentials.tfrc.json": (".terraform.d/credentials.tfrc.json",),
}

# Names close to a documented one that no page calls a credential file: they reach the box.
NOT_CREDENTIALS: tuple[str, ...] = (
    ".envrc.example", ".npmrc.example", ".env-sample", "env.example", "env.py", "environment.yml", ".environment",
    "dotenv.md", "credentials", "credentials.py", "my.cnf", "pgpass.txt", "netrc.md", "known_hosts",
    "ssh/config", "aws/credentials", "kube/config", "docker/config.json", ".config/gh-dash/config.yml",
    ".config/gcloudx/settings", ".cargo/config.toml", ".gem/specs/index", ".terraform.d/plugins/p",
    "keys/README.md", "key.py", "keyboard.py", "pem.txt", "deploy.pem.txt", "server.key.md", "id.txt", "identity.py",
    "service-account.yaml", "account-service.json", "prod.env.md",
)

DIRECTORIES = ("", "sub/", "a/b/")


def _variants(path: str) -> list[str]:
    """``path`` in each directory and letter case the docs name: as written and in capitals."""
    return [directory + cased for directory in DIRECTORIES for cased in (path, path.upper())]


EXCLUDED = sorted({variant for files in DOCUMENTED_CREDENTIALS.values() for name in files
                   for variant in _variants(name)})
COPIED = sorted({variant for name in NOT_CREDENTIALS for variant in _variants(name)})


def test_the_table_holds_every_credential_pattern_the_docs_list():
    rows = [line for line in (DOCS / "apply.md").read_text().splitlines() if line.startswith("| credentials |")]
    documented = {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[2])}
    assert documented == set(DOCUMENTED_CREDENTIALS)


def test_every_documented_credential_file_is_one_and_no_near_miss_is():
    assert [path for path in EXCLUDED if not is_credential_file(path)] == []
    assert [path for path in COPIED if is_credential_file(path)] == []


def test_a_base_copy_leaves_out_exactly_the_documented_credential_files(tmp_path):
    source = tmp_path / "checkout"
    for relative in (*EXCLUDED, *COPIED):
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text(relative)
    summary = build_base(source, tmp_path / "base", box_uid=None)
    copied = sorted(str(path.relative_to(tmp_path / "base")) for path in (tmp_path / "base").rglob("*")
                    if path.is_file())
    assert copied == COPIED
    assert sorted(entry["path"] for entry in summary["excluded"]) == EXCLUDED
    assert {entry["reason"] for entry in summary["excluded"]} == {"credential file"}
