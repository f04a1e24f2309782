"""One place for the name rules every door shares: credential files, refused per-exec environment names, and the
proxy environment every exec gets.

The refused environment names are rules written the way programs read them: an exact name, a prefix (``LD_*``)
or a suffix (``*_proxy``), in exact case or in any case (npm reads ``npm_config_*`` whatever its case).
``docs/exec-env.md`` holds the table generated from them (``python -m tkbox_daemon.rules``); a test keeps the two
equal, and pins glibc's ``UNSECURE_ENVVARS`` and sudo's bad-environment table as covered.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from typing import Literal

# Files never copied into a box's workspace, whether git ignores them or not: the credentials family of the
# sensitive files (docs/apply.md) and a few more. Matched in any letter case against each path component, or each
# run of consecutive components for a pattern with a "/" (so "dir/*" is the directory and everything under it).
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
    ".docker/*",
    ".aws/*",
    ".azure/*",
    ".config/gcloud/*",
    ".config/gh/*",
    ".kube/*",
    ".ssh/*",
    ".gnupg/*",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".terraform.d/credentials.tfrc.json",
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
    "*.ppk",
    "credentials.json",
    "service-account*.json",
    ".terraformrc",
    "terraform.tfvars",
    ".vault-token",
    ".htpasswd",
    ".pgpass",
    ".my.cnf",
)

ALWAYS_EXCLUDED_DIRS: tuple[str, ...] = (".git",)


def _compiled(patterns: list[str]) -> re.Pattern[str]:
    """One regex for several fnmatch patterns: each alternative is ``fnmatch.translate``'s, anchored at the end."""
    return re.compile("|".join(fnmatch.translate(pattern) for pattern in patterns))


# The patterns compiled once: one regex for the single-component ones, one per depth for the others (a workspace
# of 20,000 files is matched in milliseconds, not in the seconds pattern-by-pattern fnmatch took).
_COMPONENT_PATTERN = _compiled([pattern for pattern in CREDENTIAL_FILE_PATTERNS if "/" not in pattern])
_RUN_PATTERNS = {depth: _compiled([pattern for pattern in CREDENTIAL_FILE_PATTERNS if pattern.count("/") + 1 == depth])
                 for depth in {pattern.count("/") + 1 for pattern in CREDENTIAL_FILE_PATTERNS if "/" in pattern}}


@functools.lru_cache(maxsize=4096)
def _is_credential_component(part: str) -> bool:
    return _COMPONENT_PATTERN.match(part) is not None


def _ends_in_credential(parts: tuple[str, ...]) -> bool:
    """Whether the last component, or a run of components ending with it, matches a pattern."""
    if _is_credential_component(parts[-1]):
        return True
    return any(len(parts) >= depth and pattern.match("/".join(parts[-depth:])) is not None
               for depth, pattern in _RUN_PATTERNS.items())


@functools.lru_cache(maxsize=4096)
def _is_credential_directory(parts: tuple[str, ...]) -> bool:
    """Whether a directory path (casefolded components) matches anywhere: the files of one directory share it."""
    return bool(parts) and (_is_credential_directory(parts[:-1]) or _ends_in_credential(parts))


def is_credential_file(relative_path: str) -> bool:
    """True when ``relative_path`` (POSIX, relative to the checkout) names a credential file: a component matches
    a pattern without "/", or a run of consecutive components one with (``fnmatch`` rules, any letter case)."""
    parts = tuple(relative_path.casefold().split("/"))
    return _is_credential_directory(parts[:-1]) or _ends_in_credential(parts)


# The proxy every exec's environment names: the guest's egress forwarder, the box's one way to the network door
# (docs/guest.md).  The daemon puts these in the boot config's env; a per-exec env may not change them.
EGRESS_PROXY_URL = "http://127.0.0.1:3128"
PROXY_ENV: dict[str, str] = {
    "HTTP_PROXY": EGRESS_PROXY_URL, "HTTPS_PROXY": EGRESS_PROXY_URL,
    "http_proxy": EGRESS_PROXY_URL, "https_proxy": EGRESS_PROXY_URL,
    "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1",
}
# Other proxy names a program may read instead (refused by the ``*_proxy`` rule below, like every such name).
OTHER_PROXY_ENV_NAMES: tuple[str, ...] = ("ALL_PROXY", "all_proxy")


# ---- per-exec environment names ---------------------------------------------------------------------------------
# Why they are refused: ``-e`` is for a command's ordinary settings.  A name refused here makes a program, or a
# trusted tool it starts, run code its command line does not name (a library to preload, a file a shell sources, a
# pager, a compiler wrapper, a package manager's script shell) or leave the box's rules (another proxy, other
# certificate authorities).  Such a name can still be set in the command itself (``-- env NAME=VALUE PROGRAM``,
# ``sh -c '...'``), as the command's own words, which the policy judges.  A box is not setuid, so glibc's and
# sudo's reason (an unprivileged caller steering a privileged program) is not ours; their lists are taken whole
# anyway, because every name on them is one of ours too.


@dataclass(frozen=True)
class EnvFamily:
    """Names refused for one reason: ``summary`` goes into each refusal, ``why`` into the docs, ``fix`` (with
    ``{name}``) says what to do instead."""

    name: str
    summary: str
    why: str
    fix: str = ("set it in the command itself instead, where the signer's policy decides on it: "
                "tkbox exec BOX -- env {name}=VALUE PROGRAM")


ENV_FAMILIES: dict[str, EnvFamily] = {family.name: family for family in (
    EnvFamily("loader", "the C library acts on it before the program's own code runs",
              "The C library and the dynamic loader read these before a program's own code runs: they load other "
              "code into it (`LD_PRELOAD`, `LD_AUDIT`, `GCONV_PATH` modules) or change which files it reads and "
              "how it behaves (`LOCPATH`, `NLSPATH`, `TZDIR`, the resolver's files and options, "
              "`GLIBC_TUNABLES`, `MALLOC_*`). glibc drops all of them for setuid programs (`UNSECURE_ENVVARS`) "
              "and sudo for every command."),
    EnvFamily("other-systems", "another system's loader reads it, and sudo refuses it everywhere",
              "The loaders and libraries of other systems read these (macOS `DYLD_*`, AIX `LDR_*`, `LIBPATH` and "
              "`AUTHSTATE`, HP-UX `SHLIB_PATH`, IRIX `_RLD*`, the BSDs' `PATH_LOCALE`). No Linux program is known "
              "to read them; sudo drops them for every command, no job needs them, and refusing them keeps this "
              "list a superset of sudo's."),
    EnvFamily("shell", "a shell runs, sources or expands what it names, or finds programs and files with it",
              "Shells read these at start or before each command: a file to source (`ENV`, `BASH_ENV`, "
              "`ZDOTDIR`), functions and options (`BASH_FUNC_*`, `SHELLOPTS`, `FPATH`), text they run or expand "
              "(`PROMPT_COMMAND`, `PS0`-`PS4`, `NULLCMD`), how words split and globs match (`IFS`, "
              "`GLOBIGNORE`), where programs and files are found (`PATH`, `CDPATH`, `HOME`). `sh -c 'make'` "
              "would run something the line does not say."),
    EnvFamily("runtime", "the runtime loads code or modules from what it names",
              "Language runtimes read these: code to load before the program (`PYTHONSTARTUP`, `PERL5OPT`, "
              "`RUBYOPT`, `NODE_OPTIONS`, `JAVA_TOOL_OPTIONS`) or where modules come from (`PYTHONPATH`, "
              "`PERL5LIB`, `RUBYLIB`, `NODE_PATH`, `CLASSPATH`)."),
    EnvFamily("build", "the build runs the program, plugin or settings it names",
              "Compilers and build tools read these: which compiler, linker or wrapper runs (`CC`, `LD`, "
              "`RUSTC_WRAPPER`, `RUSTUP_TOOLCHAIN`), and flags or files that load plugins or run tools "
              "(`RUSTFLAGS`, `GOFLAGS=-toolexec`, `GOENV`, `MAKEFLAGS`)."),
    EnvFamily("package", "the package manager takes any of its settings from it",
              "Package managers take any setting from these: the registry to install from, the shell their "
              "scripts run in (`npm_config_script_shell`), plugins to load (`YARN_PLUGINS`), another program to "
              "run in their place (`YARN_YARN_PATH`), their configuration files (`npm_config_userconfig`). npm "
              "and yarn read their names in any case, so every case is refused."),
    EnvFamily("git", "git runs the program or reads the configuration it names",
              "git reads these: programs it runs (`GIT_SSH_COMMAND`, `GIT_EXTERNAL_DIFF`, `GIT_PAGER`, "
              "`GIT_ASKPASS`), configuration (`GIT_CONFIG_*`), where its programs and repository are "
              "(`GIT_EXEC_PATH`, `GIT_DIR`)."),
    EnvFamily("helper", "the program starts the helper it names, or reads settings from it",
              "Programs start these as helpers (an editor, a pager and its input filters, a browser, a password "
              "prompt) or read settings from them (terminal descriptions, readline's inputrc, every XDG "
              "configuration)."),
    EnvFamily("proxy", f"the box's only way out is its own proxy, {EGRESS_PROXY_URL}, already in every command's "
                       "HTTP_PROXY and HTTPS_PROXY",
              f"The box's only way out is its own proxy, `{EGRESS_PROXY_URL}`, which tkbox names in every "
              "command's environment (the second table). Python's `urllib` (and so pip and requests) takes every "
              "name ending in `_proxy`, in any case, as a proxy setting, so all of them are refused.",
              fix="drop -e {name}: every command already reaches the network through the box's proxy"),
    EnvFamily("trust", "it changes which certificates, crypto configuration or credentials are trusted",
              "These change whom a program trusts: other certificate authorities (`SSL_CERT_FILE`, "
              "`REQUESTS_CA_BUNDLE`), OpenSSL's configuration (which can load engines: code), Kerberos' and "
              "SecurID's configuration."),
)}


@dataclass(frozen=True)
class EnvRule:
    """Names one program reads, matched as it reads them.

    ``text`` is the whole name (``form`` exact), its start (prefix) or its end (suffix), spelled as the program's
    documentation spells it; ``any_case``: the program matches it whatever the case.  ``reader`` says who reads it.
    """

    text: str
    form: Literal["exact", "prefix", "suffix"]
    any_case: bool
    reader: str
    family: str

    def matches(self, name: str) -> bool:
        subject, text = (name.lower(), self.text.lower()) if self.any_case else (name, self.text)
        if self.form == "prefix":
            return subject.startswith(text)
        if self.form == "suffix":
            return subject.endswith(text)
        return subject == text

    @property
    def shown(self) -> str:
        """``LD_*``, ``*_proxy``, ``PATH``; with `` in any case`` when the program ignores case."""
        text = {"prefix": f"{self.text}*", "suffix": f"*{self.text}"}.get(self.form, self.text)
        return f"{text} in any case" if self.any_case else text


def _rules(family: str, reader: str, *patterns: str, any_case: bool = False) -> tuple[EnvRule, ...]:
    """One rule per pattern: ``NAME`` exact, ``NAME*`` a prefix, ``*NAME`` a suffix."""
    def rule(pattern: str) -> EnvRule:
        if pattern.endswith("*"):
            return EnvRule(pattern[:-1], "prefix", any_case, reader, family)
        if pattern.startswith("*"):
            return EnvRule(pattern[1:], "suffix", any_case, reader, family)
        return EnvRule(pattern, "exact", any_case, reader, family)
    return tuple(rule(pattern) for pattern in patterns)


REFUSED_ENV_RULES: tuple[EnvRule, ...] = (
    # glibc's UNSECURE_ENVVARS (every LD_ name, current and past, is under LD_*) and the rest of sudo's table.
    *_rules("loader", "the dynamic loader (glibc's and musl's ld.so)", "LD_*"),
    *_rules("loader", "glibc's iconv (conversion modules)", "GCONV_PATH"),
    *_rules("loader", "glibc's getconf", "GETCONF_DIR"),
    *_rules("loader", "glibc, at every program start", "GLIBC_TUNABLES"),
    *_rules("loader", "glibc's malloc", "MALLOC_*"),
    *_rules("loader", "glibc (locales)", "LOCPATH"),
    *_rules("loader", "catopen (message catalogues)", "NLSPATH"),
    *_rules("loader", "glibc (time zone files)", "TZDIR"),
    *_rules("loader", "glibc (temporary files) and most programs", "TMPDIR"),
    *_rules("loader", "glibc's resolver", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "RESOLV_HOST_CONF"),
    *_rules("loader", "glibc's NIS+ lookups", "NIS_PATH"),
    *_rules("other-systems", "macOS's dynamic loader", "DYLD_*"),
    *_rules("other-systems", "AIX's loader", "LDR_*", "LIBPATH"),
    *_rules("other-systems", "AIX's login", "AUTHSTATE"),
    *_rules("other-systems", "HP-UX's loader", "SHLIB_PATH"),
    *_rules("other-systems", "IRIX's loader", "_RLD*"),
    *_rules("other-systems", "the BSDs' C library (locales)", "PATH_LOCALE"),
    *_rules("shell", "every shell and execvp (which program a name runs)", "PATH"),
    *_rules("shell", "every program that reads a file in the home directory (.bashrc, .gitconfig, .npmrc)", "HOME"),
    *_rules("shell", "programs that start the user's shell", "SHELL"),
    *_rules("shell", "sh, dash and ksh (a file to source)", "ENV"),
    *_rules("shell", "bash (a file to source)", "BASH_ENV"),
    *_rules("shell", "bash (exported functions)", "BASH_FUNC_*"),
    *_rules("shell", "bash", "BASH_*"),
    *_rules("shell", "bash (options set before a script runs)", "SHELLOPTS", "BASHOPTS"),
    *_rules("shell", "every shell (how words split)", "IFS"),
    *_rules("shell", "bash (which names globs skip)", "GLOBIGNORE"),
    *_rules("shell", "every shell's cd", "CDPATH"),
    *_rules("shell", "interactive shells (expanded or run around each command)", "PROMPT_COMMAND", "PS0", "PS1",
            "PS2", "PS3", "PS4"),
    *_rules("shell", "bash's fc (the editor it starts)", "FCEDIT"),
    *_rules("shell", "ksh and zsh (where functions load from)", "FPATH"),
    *_rules("shell", "zsh (the command a bare redirection runs)", "NULLCMD", "READNULLCMD"),
    *_rules("shell", "zsh (where its startup files are)", "ZDOTDIR"),
    *_rules("shell", "zsh (where its temporary files go)", "TMPPREFIX"),
    *_rules("shell", "the GNU tools (they change behaviour)", "POSIXLY_CORRECT"),
    *_rules("runtime", "CPython", "PYTHON*"),
    *_rules("runtime", "perl", "PERL*"),
    *_rules("runtime", "ruby", "RUBY*"),
    *_rules("runtime", "RubyGems", "GEM_*"),
    *_rules("runtime", "node", "NODE_*"),
    *_rules("runtime", "every JVM", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH"),
    *_rules("build", "make and build scripts (the compiler, linker or archiver they run)", "CC", "CXX", "CPP",
            "LD", "AR"),
    *_rules("build", "GNU make", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"),
    *_rules("build", "cargo and rustc", "RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTFLAGS",
            "CARGO_*"),
    *_rules("build", "rustup (the toolchain to run, which may be a path)", "RUSTUP_*"),
    *_rules("build", "the go command", "GOFLAGS", "GOROOT", "GOPATH", "GOPROXY", "GOTOOLCHAIN", "GOENV", "CGO_*"),
    *_rules("package", "npm", "npm_config_*", any_case=True),
    *_rules("package", "pnpm (its own settings; every case is refused, as for npm)", "pnpm_config_*", any_case=True),
    *_rules("package", "yarn", "yarn_*", any_case=True),
    *_rules("package", "pip", "PIP_*"),
    *_rules("package", "uv", "UV_*"),
    *_rules("package", "Poetry", "POETRY_*"),
    *_rules("package", "conda", "CONDA_*"),
    *_rules("package", "Composer", "COMPOSER_*"),
    *_rules("package", "Python tools that honour an active virtual environment", "VIRTUAL_ENV"),
    *_rules("package", "Nix", "NIX_*"),
    *_rules("git", "git", "GIT_*"),
    *_rules("helper", "git, crontab, less and others (the editor they start)", "EDITOR", "VISUAL"),
    *_rules("helper", "man, git and others (the pager they start)", "PAGER", "MANPAGER"),
    *_rules("helper", "less (its options, input filters, editor and key files)", "LESS", "LESSOPEN", "LESSCLOSE",
            "LESSEDIT", "LESSKEY*"),
    *_rules("helper", "programs that open a web page", "BROWSER"),
    *_rules("helper", "ssh and sudo (the password prompt they start)", "SSH_ASKPASS", "SUDO_ASKPASS"),
    *_rules("helper", "ncurses (terminal descriptions)", "TERMINFO", "TERMINFO_DIRS"),
    *_rules("helper", "termcap readers", "TERMCAP", "TERMPATH"),
    *_rules("helper", "readline", "INPUTRC"),
    *_rules("helper", "programs that follow the XDG base directories (their configuration)", "XDG_CONFIG_HOME",
            "XDG_CONFIG_DIRS", "XDG_DATA_DIRS"),
    *_rules("proxy", "Python's urllib, pip and requests; curl, wget and git read the usual spellings", "*_proxy",
            any_case=True),
    *_rules("trust", "OpenSSL and the programs built on it", "SSL_CERT_FILE", "SSL_CERT_DIR", "OPENSSL_CONF",
            "OPENSSL_ENGINES"),
    *_rules("trust", "Python's requests", "REQUESTS_CA_BUNDLE"),
    *_rules("trust", "curl", "CURL_CA_BUNDLE"),
    *_rules("trust", "Kerberos", "KRB5_CONFIG*", "KRB5_KTNAME"),
    *_rules("trust", "RSA SecurID", "VAR_ACE", "USR_ACE", "DLC_ACE"),
)

# Names that would otherwise match a refused prefix but change nothing about what runs (exact case).
HARMLESS_ENV_NAMES: tuple[str, ...] = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
                                       "PYTHONHASHSEED", "NODE_ENV", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
                                       "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")

# A value bash before 4.3 (Shellshock, CVE-2014-6271) imports as a function, whatever the name: sudo's ``*=()*``.
BASH_FUNCTION_VALUE_START = "()"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z", re.ASCII)


def refusing_rule(name: str) -> EnvRule | None:
    """The first rule that refuses ``name`` (a valid name, not one of the harmless ones), or None."""
    if name in HARMLESS_ENV_NAMES:
        return None
    return next((rule for rule in REFUSED_ENV_RULES if rule.matches(name)), None)


def refused_env_reason(name: str) -> str | None:
    """Why ``name`` may not be set per exec, or None when it may."""
    if not _ENV_NAME.match(name):
        return (f"{name!r} is not a valid environment variable name (a letter or _, then letters, digits or _, "
                "at most 128)")
    if name in PROXY_ENV:
        return (f"{name} is set by tkbox for every command in a box ({name}={PROXY_ENV[name]}: the box's only "
                f"way out is the network door at {EGRESS_PROXY_URL}) and cannot be changed per exec; drop -e {name}")
    rule = refusing_rule(name)
    if rule is None:
        return None
    family = ENV_FAMILIES[rule.family]
    return (f"-e {name} is refused (rule {rule.shown}, read by {rule.reader}: {family.summary}); "
            + family.fix.format(name=name))


def refused_env_value_reason(name: str, value: str) -> str | None:
    """Why ``value`` may not be given to ``name`` per exec (a value old bash would run as code), or None."""
    if value.startswith(BASH_FUNCTION_VALUE_START):
        return (f"the value of {name} starts with '()', which bash before 4.3 imports as a function and runs "
                "(Shellshock; sudo refuses it too); set it in the command itself if it must start so")
    return None


def env_rules_markdown() -> str:
    """The tables of docs/exec-env.md, generated from the rules above (a test keeps them equal)."""
    rows = ["| refused names | matched | read by | why |", "|---|---|---|---|"]
    for rule in REFUSED_ENV_RULES:
        matched = {"prefix": "prefix", "suffix": "suffix"}.get(rule.form, "exact name")
        matched += ", any case" if rule.any_case else ""
        rows.append(f"| `{rule.shown.removesuffix(' in any case')}` | {matched} | {rule.reader} | "
                    f"[{rule.family}](#{rule.family}) |")
    rows += ["", "| set by tkbox in every command (refused per exec) | value |", "|---|---|"]
    rows += [f"| `{name}` | `{value}` |" for name, value in PROXY_ENV.items()]
    rows += ["", "| allowed although a prefix above covers it |", "|---|"]
    rows += [f"| `{name}` |" for name in HARMLESS_ENV_NAMES]
    rows += ["", "## Why each family is refused", ""]
    for family in ENV_FAMILIES.values():
        rows += [f"### {family.name}", "", family.why, "", f"What to do: {family.fix.format(name='NAME')}.", ""]
    return "\n".join(rows)


if __name__ == "__main__":
    print(env_rules_markdown(), end="")
