"""One place for the name rules every door shares: credential files, refused per-exec environment names, and the
proxy environment every exec gets.

Docs (`docs/limits.md`, `docs/architecture.md`) are checked against these lists by tests.
"""

from __future__ import annotations

import fnmatch
import re

# Files never copied into a box's workspace, whether git ignores them or not (matched against each path component
# and against the whole relative path).
CREDENTIAL_FILE_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".yarnrc",
    ".yarnrc.yml",
    ".gem/credentials",
    ".git-credentials",
    ".dockercfg",
    ".docker/config.json",
    ".aws/credentials",
    ".aws/config",
    ".azure/*",
    ".config/gcloud/*",
    ".kube/config",
    ".ssh/*",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "id_*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
    "credentials.json",
    "service-account*.json",
    ".terraformrc",
    "terraform.tfvars",
    ".vault-token",
    ".htpasswd",
)

ALWAYS_EXCLUDED_DIRS: tuple[str, ...] = (".git",)


def is_credential_file(relative_path: str) -> bool:
    """True when ``relative_path`` (POSIX, relative to the checkout) names a credential file."""
    parts = relative_path.split("/")
    for pattern in CREDENTIAL_FILE_PATTERNS:
        if "/" in pattern:
            depth = pattern.count("/") + 1
            for start in range(len(parts) - depth + 1):
                if fnmatch.fnmatchcase("/".join(parts[start:start + depth]), pattern):
                    return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return True
    return False


# The proxy every exec's environment names: the guest's egress forwarder, the box's one way to the network door
# (docs/guest.md).  The daemon puts these in the boot config's env; a per-exec env may not change them.
EGRESS_PROXY_URL = "http://127.0.0.1:3128"
PROXY_ENV: dict[str, str] = {
    "HTTP_PROXY": EGRESS_PROXY_URL, "HTTPS_PROXY": EGRESS_PROXY_URL,
    "http_proxy": EGRESS_PROXY_URL, "https_proxy": EGRESS_PROXY_URL,
    "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1",
}
# Other proxy names a program may read instead: refused per exec too, so the proxy above is the only one named.
OTHER_PROXY_ENV_NAMES: tuple[str, ...] = ("ALL_PROXY", "all_proxy")

# Per-exec environment names refused because they change what runs or how it loads.  Prefix rules end in '*'.
REFUSED_ENV_NAMES: tuple[str, ...] = (
    "LD_*", "GIT_*", "PYTHON*", "NODE_*", "NPM_CONFIG_*", "BASH_*", "BASH_FUNC_*", "PERL*", "RUBY*", "GEM_*",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "DYLD_*", "GCONV_PATH", "GETCONF_DIR",
    "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "NLSPATH", "MALLOC_*", "GLIBC_TUNABLES", "TMPDIR",
    "PATH", "HOME", "SHELL", "PS4", "PS1", "PROMPT_COMMAND", "IFS", "ENV", "BASH_ENV", "CDPATH", "SHELLOPTS",
    "BASHOPTS", "POSIXLY_CORRECT", "EDITOR", "VISUAL", "PAGER", "GIT_PAGER", "LESSOPEN", "LESSCLOSE", "MANPAGER",
    "BROWSER", "SSH_ASKPASS", "SUDO_ASKPASS", "CC", "CXX", "CPP", "LD", "AR", "MAKEFLAGS", "MAKELEVEL", "MFLAGS",
    "RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTFLAGS", "CARGO_*", "GOFLAGS", "GOROOT", "GOPATH",
    "GOPROXY", "GOTOOLCHAIN", "CGO_*", "PIP_*", "UV_*", "POETRY_*", "VIRTUAL_ENV", "CONDA_*", "NODE_OPTIONS",
    "COMPOSER_*", *PROXY_ENV, *OTHER_PROXY_ENV_NAMES, "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "OPENSSL_CONF", "OPENSSL_ENGINES", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS",
    "TERMINFO", "TERMINFO_DIRS", "INPUTRC", "ZDOTDIR", "KRB5_CONFIG", "NIX_*",
)

# Names that would otherwise match a refused prefix but change nothing about what runs.
HARMLESS_ENV_NAMES: tuple[str, ...] = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
                                       "PYTHONHASHSEED", "NODE_ENV", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
                                       "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z", re.ASCII)


def refused_env_reason(name: str) -> str | None:
    """Why ``name`` may not be set per exec, or None when it may."""
    if not _ENV_NAME.match(name):
        return f"{name!r} is not a valid environment variable name"
    if name in HARMLESS_ENV_NAMES:
        return None
    if name in PROXY_ENV:
        return (f"{name} is set by tkbox for every command in a box ({name}={PROXY_ENV[name]}: the box's only "
                f"way out is the network door at {EGRESS_PROXY_URL}) and cannot be changed per exec; drop -e {name}")
    if name in OTHER_PROXY_ENV_NAMES:
        return (f"{name} would name another proxy than the box's own ({EGRESS_PROXY_URL}, already in every "
                f"command's HTTP_PROXY and HTTPS_PROXY: the box's only way out); drop -e {name}")
    for rule in REFUSED_ENV_NAMES:
        if (rule.endswith("*") and name.startswith(rule[:-1])) or name == rule:
            return f"{name} changes what a program loads or runs (rule {rule}); set it inside the command instead"
    return None
