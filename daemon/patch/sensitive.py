"""Files that steer the next run or host automation: a patch may change them only with ``--allow-sensitive``.

One table, ``SENSITIVE_FILES``, of entries (kind, pattern, family, reason); ``sensitive_reason(path)`` says why a
checkout-relative path is sensitive, or None. docs/apply.md shows the table (``python -m
tkbox_daemon.patch.sensitive`` prints it; a test keeps the two equal), and tests check that every path the
policy's ``{steering}`` and ``{credential}`` patterns and rule TK-F008 catch, and every credential file of
``daemon/rules.py``, is sensitive here too.

How an entry matches: every entry is compared with each component of the path, or with each run of consecutive
components when the pattern has a ``/``, anywhere in the path. So a file is sensitive when its own name or the
name of any directory above it matches: ``sub/.npmrc``, ``packages/a/package.json`` and ``x/.github/workflows/
ci.yml`` all are. Kinds: ``basename`` (exactly that name, or that short run of names such as
``.vscode/tasks.json``), ``prefix`` (a directory: the run of components, and everything under it), ``glob``
(``fnmatch``: ``*``, ``?``, ``[...]``), ``suffix`` (the name ends with it, shown as ``*.pem``).

Names are compared as a case-insensitive file system would see them: case-folded, with the code points HFS+
ignores removed and trailing dots and spaces (which NTFS drops) stripped, so ``MAKEFILE``, ``.GitHub/Workflows/``
and ``.npmrc.`` match. The parser refuses most such spellings anyway; here they only ever make more files
sensitive, never fewer.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

KINDS = ("basename", "prefix", "glob", "suffix")


@dataclass(frozen=True)
class SensitiveEntry:
    """One row of the table: how ``pattern`` matches (``kind``, one of ``KINDS``), its family and why."""

    kind: str
    pattern: str
    family: str
    reason: str

    @property
    def shown(self) -> str:
        """The pattern as docs and messages show it: a prefix with its trailing ``/``, a suffix as ``*.pem``."""
        return f"*{self.pattern}" if self.kind == "suffix" else self.pattern


def _rows(kind: str, family: str, reason: str, *patterns: str) -> list[SensitiveEntry]:
    return [SensitiveEntry(kind, pattern, family, reason) for pattern in patterns]


SENSITIVE_FILES: tuple[SensitiveEntry, ...] = tuple(
    # CI: what runs on the next push, merge or schedule, usually with the repository's secrets
    _rows("prefix", "CI", "CI workflow", ".github/workflows/")
    + _rows("prefix", "CI", "CI action run by workflows", ".github/actions/")
    + _rows("basename", "CI", "CI action definition", "action.yml", "action.yaml")
    + _rows("basename", "CI", "CI pipeline", ".gitlab-ci.yml", ".gitlab-ci.yaml", "azure-pipelines.yml",
            "azure-pipelines.yaml", ".travis.yml", ".travis.yaml", "bitbucket-pipelines.yml",
            "bitbucket-pipelines.yaml", ".drone.yml", ".drone.yaml", ".woodpecker.yml", ".woodpecker.yaml",
            "appveyor.yml", ".appveyor.yml", "cloudbuild.yaml", "cloudbuild.yml", "buildspec.yml")
    + _rows("glob", "CI", "CI pipeline", "Jenkinsfile*")
    + _rows("prefix", "CI", "CI configuration", ".gitlab/ci/", ".circleci/", ".buildkite/", ".woodpecker/",
            ".azure-pipelines/", ".semaphore/", ".teamcity/", ".tekton/")
    # git: hooks run programs on commit, push and checkout; settings name filters and submodule sources
    + _rows("prefix", "git hooks", "git's own directory (hooks, config)", ".git/")
    + _rows("prefix", "git hooks", "git hooks", ".githooks/", ".husky/")
    + _rows("basename", "git hooks", "pre-commit hooks", ".pre-commit-config.yaml", ".pre-commit-config.yml",
            ".pre-commit-hooks.yaml", ".pre-commit-hooks.yml")
    + _rows("basename", "git hooks", "git hook manager", "lefthook.yml", "lefthook.yaml", ".lefthook.yml",
            ".lefthook.yaml", "lefthook-local.yml")
    + _rows("basename", "git settings", "git settings (filters, submodule sources)", ".gitattributes",
            ".gitmodules", ".lfsconfig")
    # credentials: keys and tokens (daemon/rules.py keeps the same files out of a box's workspace)
    + _rows("basename", "credentials", "credentials file", ".env", ".netrc", "_netrc", ".git-credentials",
            ".dockercfg", "credentials.json", ".terraformrc", "terraform.tfvars", ".vault-token", ".htpasswd",
            ".pgpass", ".my.cnf")
    + _rows("glob", "credentials", "environment file with secrets", ".env.*", "*.env")
    + _rows("glob", "credentials", "SSH private key name", "id_*")
    + _rows("glob", "credentials", "cloud service account key", "service-account*.json")
    + _rows("suffix", "credentials", "private key or key store", ".pem", ".key", ".p12", ".pfx", ".keystore",
            ".jks", ".ppk")
    + _rows("prefix", "credentials", "credentials directory", ".ssh/", ".gnupg/", ".aws/", ".azure/",
            ".config/gcloud/", ".kube/", ".docker/", ".config/gh/")
    + _rows("basename", "credentials", "registry or cloud token", ".gem/credentials", ".cargo/credentials",
            ".cargo/credentials.toml", ".terraform.d/credentials.tfrc.json")
    # package managers: registries, tokens, and scripts that run on install
    + _rows("basename", "package manager", "package manager config (registry, tokens, script shell)", ".npmrc",
            ".yarnrc", ".yarnrc.yml", ".pypirc", "pip.conf", "pip.ini", "uv.toml", ".condarc", "bunfig.toml",
            ".bundle/config")
    + _rows("basename", "package manager", "package manifest whose scripts run on install or test",
            "package.json", "composer.json", "deno.json", "deno.jsonc", "Gemfile", ".pnpmfile.cjs")
    + _rows("glob", "package manager", "package manifest evaluated as code", "*.gemspec")
    + _rows("basename", "package manager", "Python build configuration (build backend, setup code)",
            "pyproject.toml", "setup.py")
    # build tools: their commands run on the next build or test. Bazel's bare BUILD and WORKSPACE are left out:
    # names match directories too, and build/ and workspace/ directories are everywhere.
    + _rows("basename", "build tool", "commands run by make", "Makefile", "GNUmakefile")
    + _rows("glob", "build tool", "make include file", "*.mk")
    + _rows("basename", "build tool", "build or task runner file", "justfile", ".justfile", "Taskfile.yml",
            "Taskfile.yaml", "Rakefile", "build.xml", "pom.xml", "build.gradle", "build.gradle.kts",
            "settings.gradle", "settings.gradle.kts", "gradle.properties", "gradle-wrapper.properties", "gradlew",
            "mvnw", "CMakeLists.txt", "meson.build", "BUILD.bazel", "WORKSPACE.bazel",
            "MODULE.bazel", ".bazelrc", "build.rs", "Cargo.toml", ".cargo/config", ".cargo/config.toml",
            "Vagrantfile")
    + _rows("glob", "build tool", "build script", "*.cmake", "*.bzl")
    + _rows("prefix", "build tool", "Maven wrapper and extensions", ".mvn/")
    + _rows("basename", "build tool", "test or task configuration that runs code", "conftest.py", "noxfile.py",
            "tox.ini")
    # editors: tasks, launch configurations and settings that name programs to run
    + _rows("basename", "editor tasks", "editor tasks or settings", ".vscode/tasks.json", ".vscode/launch.json",
            ".vscode/settings.json", ".idea/workspace.xml", ".zed/tasks.json", ".zed/settings.json",
            ".nvim.lua", ".nvimrc", ".exrc")
    + _rows("glob", "editor tasks", "editor workspace or run configuration", "*.code-workspace", "*.run.xml")
    + _rows("prefix", "editor tasks", "editor run configurations", ".idea/runConfigurations/", ".helix/")
    # dev containers: what a container built from the checkout runs, and with which mounts
    + _rows("prefix", "dev container", "dev container definition", ".devcontainer/")
    + _rows("basename", "dev container", "dev container definition", ".devcontainer.json", ".gitpod.yml")
    # agents: instructions and tool (MCP) servers the next agent run obeys or starts
    + _rows("basename", "agent instructions", "agent instructions", "CLAUDE.md", "CLAUDE.local.md", "AGENTS.md",
            "AGENT.md", "GEMINI.md", ".cursorrules", ".windsurfrules", ".clinerules", ".roomodes", ".goosehints",
            ".github/copilot-instructions.md", ".aider.conf.yml", ".aider.conf.yaml")
    + _rows("basename", "agent instructions", "agent tool (MCP) servers", ".mcp.json", ".vscode/mcp.json")
    + _rows("prefix", "agent instructions", "agent configuration", ".claude/", ".cursor/", ".windsurf/", ".codex/",
            ".continue/", ".gemini/", ".roo/", ".junie/", ".kiro/", ".amazonq/", ".github/instructions/",
            ".github/prompts/")
    # shells: start-up files, and files a shell runs on entering the directory
    + _rows("basename", "shell startup", "shell start-up file", ".bashrc", ".bash_profile", ".bash_login",
            ".bash_logout", ".profile", ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".inputrc")
    + _rows("prefix", "shell startup", "shell start-up files", ".config/fish/")
    + _rows("basename", "shell startup", "runs when a shell enters the directory (direnv, mise)", ".envrc",
            "mise.toml", ".mise.toml")
    # host automation: programs the host starts on login or on a timer
    + _rows("prefix", "host automation", "programs started at login or on a timer", ".config/autostart/",
            ".config/systemd/")
)

# Code points HFS+ ignores in names (as git's is_hfs_dotgit does), removed before comparing.
_HFS_IGNORED = dict.fromkeys([0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070),
                              0xFEFF])


def _folded(component: str) -> str:
    """A name as a case-insensitive, HFS+- or NTFS-like file system compares it."""
    return component.translate(_HFS_IGNORED).casefold().rstrip(" .")


def _components(path: str) -> tuple[str, ...]:
    return tuple(folded for part in path.split("/") if (folded := _folded(part)))


class _Index:
    """The table arranged for lookups: exact runs of components by their length, suffixes, compiled globs."""

    def __init__(self, entries: tuple[SensitiveEntry, ...]) -> None:
        self.exact: dict[tuple[str, ...], int] = {}
        self.suffixes: list[tuple[str, int]] = []
        self.globs: list[tuple[int, re.Pattern[str], int]] = []
        for number, entry in enumerate(entries):
            if entry.kind not in KINDS:
                raise ValueError(f"sensitive entry {entry.pattern!r}: unknown kind {entry.kind!r}")
            if entry.kind == "suffix":
                self.suffixes.append((_folded(entry.pattern), number))
            elif entry.kind == "glob":
                parts = entry.pattern.casefold().split("/")
                self.globs.append((len(parts), re.compile(fnmatch.translate("/".join(parts))), number))
            else:
                key = _components(entry.pattern)
                if not key or key in self.exact:
                    raise ValueError(f"sensitive entry {entry.pattern!r} is empty or listed twice")
                self.exact[key] = number
        self.exact_lengths = sorted({len(key) for key in self.exact})

    def first_match(self, parts: tuple[str, ...]) -> int | None:
        """The lowest table row matching any component or run of components of ``parts``."""
        best: int | None = None

        def consider(number: int | None) -> None:
            nonlocal best
            if number is not None and (best is None or number < best):
                best = number

        for start in range(len(parts)):
            for length in self.exact_lengths:
                if start + length <= len(parts):
                    consider(self.exact.get(parts[start:start + length]))
            part = parts[start]
            for suffix, number in self.suffixes:
                if part.endswith(suffix):
                    consider(number)
            for length, compiled, number in self.globs:
                if start + length <= len(parts) and compiled.match("/".join(parts[start:start + length])):
                    consider(number)
        return best


_INDEX = _Index(SENSITIVE_FILES)


def sensitive_entry(path: str) -> SensitiveEntry | None:
    """The first table entry that makes ``path`` (POSIX, relative to the checkout) sensitive, or None."""
    number = _INDEX.first_match(_components(path))
    return None if number is None else SENSITIVE_FILES[number]


def sensitive_reason(path: str) -> str | None:
    """Why ``path`` needs ``--allow-sensitive`` (e.g. "CI workflow (.github/workflows/)"), or None if it does not.

    Check both the source and the destination of a rename or copy.
    """
    entry = sensitive_entry(path)
    return None if entry is None else f"{entry.reason} ({entry.shown})"


def markdown_table() -> str:
    """The table of docs/apply.md, "Sensitive files", generated from ``SENSITIVE_FILES`` (a test keeps them equal)."""
    rows = ["| family | files | kind | why |", "|---|---|---|---|"]
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for entry in SENSITIVE_FILES:
        grouped.setdefault((entry.family, entry.kind, entry.reason), []).append(f"`{entry.shown}`")
    for (family, kind, reason), shown in grouped.items():
        rows.append(f"| {family} | {', '.join(shown)} | {kind} | {reason} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
