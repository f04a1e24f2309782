"""The sensitive-file table: each family's files are caught, look-alikes are not, matching ignores case and depth,
and docs/apply.md shows exactly the table."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.patch import sensitive
from tkbox_daemon.patch.sensitive import SENSITIVE_FILES, sensitive_entry, sensitive_reason

ROOT = Path(__file__).resolve().parents[1]

# family -> (paths that must be sensitive, paths that must not)
EXAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "CI": ([".github/workflows/ci.yml", ".github/actions/setup/action.yml", ".gitlab-ci.yml", ".circleci/config.yml",
            "Jenkinsfile", "Jenkinsfile.release", "azure-pipelines.yaml", ".travis.yml", ".buildkite/pipeline.yml",
            "action.yml", ".woodpecker/build.yaml"],
           [".github/CODEOWNERS", ".github/ISSUE_TEMPLATE/bug.md", "docs/workflows.md", "ci.yml", "gitlab-ci.md",
            "src/jenkins.py"]),
    "git hooks": ([".git/hooks/pre-commit", ".husky/pre-push", ".pre-commit-config.yaml", "lefthook.yml",
                   ".githooks/commit-msg"],
                  ["hooks/useAuth.ts", "src/hooks.py", "pre-commit.md", ".gitignore", "docs/husky.md"]),
    "git settings": ([".gitattributes", ".gitmodules", "vendor/.gitattributes", ".lfsconfig"],
                     [".gitignore", ".git-blame-ignore-revs", "gitattributes.txt"]),
    "credentials": ([".env", ".env.local", "prod.env", "certs/server.pem", "tls/server.key", "id_rsa",
                     ".ssh/config", "home/.aws/credentials", ".kube/config", "keys/release.p12", ".git-credentials",
                     ".config/gcloud/application_default_credentials.json", "service-account-prod.json",
                     ".vault-token", ".docker/config.json"],
                    ["environment.py", "src/key.py", "keyboard.c", "docs/pem-format.md", "envs/README.md",
                     "ssh/notes.md", ".aws-notes", "monkey.txt", "id", "src/ids.py"]),
    "package manager": ([".npmrc", ".yarnrc.yml", ".pypirc", "pip.conf", "package.json", "composer.json",
                         "Gemfile", "mylib.gemspec", "pyproject.toml", "setup.py", ".bundle/config"],
                        ["package-lock.json", "yarn.lock", "poetry.lock", "requirements.txt", "src/package.py",
                         "packages/README.md", "Gemfile.lock", "setup.md"]),
    "build tool": (["Makefile", "GNUmakefile", "rules.mk", "justfile", "Taskfile.yml", "Rakefile", "build.gradle.kts",
                    "pom.xml", "CMakeLists.txt", "cmake/deps.cmake", "build.rs", "Cargo.toml", ".cargo/config.toml",
                    "conftest.py", "tests/conftest.py", "noxfile.py", "tox.ini", ".mvn/wrapper/maven-wrapper.jar",
                    "gradle/wrapper/gradle-wrapper.properties"],
                   ["make.py", "Makefile.am", "docs/makefile.md", "build/output.js", "workspace/main.c",
                    "Cargo.lock", "src/build.py", "buildscript.txt", "test_conftest.py"]),
    "editor tasks": ([".vscode/tasks.json", ".vscode/launch.json", ".vscode/settings.json", "app.code-workspace",
                      ".idea/workspace.xml", ".idea/runConfigurations/Test.xml", "Test.run.xml", ".nvim.lua"],
                     [".vscode/extensions.json", ".idea/misc.xml", "tasks.json", "src/settings.json", ".editorconfig"]),
    "dev container": ([".devcontainer/devcontainer.json", ".devcontainer/Dockerfile", ".devcontainer.json",
                       ".gitpod.yml"],
                      ["Dockerfile", "docker-compose.yml", "devcontainer.md", "container/app.py"]),
    "agent instructions": (["CLAUDE.md", "CLAUDE.local.md", "AGENTS.md", "GEMINI.md", ".claude/settings.json",
                            ".cursorrules", ".cursor/rules/x.mdc", ".clinerules", ".clinerules/style.md", ".mcp.json",
                            ".github/copilot-instructions.md", ".codex/config.toml", ".aider.conf.yml"],
                           ["README.md", "CONTRIBUTING.md", "claude.py", "docs/agent-notes.md", "agents/AGENTS.txt"]),
    "shell startup": ([".bashrc", ".zshrc", ".profile", ".envrc", ".config/fish/config.fish", "mise.toml",
                       "dotfiles/.bash_profile"],
                      ["bashrc.md", ".profile.d.md", "profile.py", "scripts/env.sh", ".config/nvim/init.lua"]),
    "host automation": ([".config/autostart/agent.desktop", ".config/systemd/user/x.service"],
                        ["systemd/README.md", "autostart.py", ".config/app.toml"]),
}


def test_every_family_has_examples():
    assert {entry.family for entry in SENSITIVE_FILES} == set(EXAMPLES)


@pytest.mark.parametrize(("family", "path"),
                         [(family, path) for family, (positives, _) in EXAMPLES.items() for path in positives])
def test_family_files_are_sensitive(family, path):
    entry = sensitive_entry(path)
    assert entry is not None, path
    assert entry.family == family, (path, entry)
    assert sensitive_reason(path) == f"{entry.reason} ({entry.shown})"


@pytest.mark.parametrize("path", [path for _, negatives in EXAMPLES.values() for path in negatives])
def test_look_alikes_are_not_sensitive(path):
    assert sensitive_reason(path) is None, path


def test_reason_names_the_pattern():
    assert sensitive_reason(".github/workflows/ci.yml") == "CI workflow (.github/workflows/)"
    assert sensitive_reason("certs/a.pem") == "private key or key store (*.pem)"
    assert sensitive_reason("src/main.py") is None


@pytest.mark.parametrize("path", [".GitHub/Workflows/x.yml", "MAKEFILE", "makefile", "SUB/.NPMRC", ".Env.Local",
                                  "CERTS/SERVER.PEM", "Claude.md", ".VSCode/Tasks.JSON", "PACKAGE.JSON"])
def test_matching_ignores_case(path):
    assert sensitive_reason(path) is not None
    assert sensitive_reason(path) == sensitive_reason(path.lower())


@pytest.mark.parametrize("path", ["sub/.npmrc", "packages/a/package.json", "a/b/c/Makefile",
                                  "tools/.github/workflows/x.yml", "x/y/.devcontainer/devcontainer.json",
                                  "deep/er/.ssh/id_ed25519"])
def test_files_below_other_directories_are_sensitive(path):
    assert sensitive_reason(path) is not None


@pytest.mark.parametrize("path", [".npmrc.", "Makefile ", ".git\u200chub/workflows/x.yml", "CLAUDE\u200d.md",
                                  "x.pem.."])
def test_spellings_that_other_file_systems_fold_are_sensitive(path):
    assert sensitive_reason(path) is not None


def test_every_entry_catches_its_own_pattern():
    for entry in SENSITIVE_FILES:
        sample = {"prefix": entry.pattern + "file", "suffix": "x" + entry.pattern,
                  "glob": entry.pattern.replace("*", "x").replace("?", "x")}.get(entry.kind, entry.pattern)
        assert sensitive_entry(sample) is not None, entry


def test_the_table_has_no_unknown_kind_and_no_duplicate():
    assert {entry.kind for entry in SENSITIVE_FILES} <= set(sensitive.KINDS)
    keys = [(entry.kind, entry.pattern.casefold()) for entry in SENSITIVE_FILES]
    assert len(keys) == len(set(keys))


def test_the_docs_show_exactly_the_table():
    text = (ROOT / "docs" / "apply.md").read_text(encoding="utf-8")
    table = text.split("<!-- sensitive-files:begin -->\n", 1)[1].split("<!-- sensitive-files:end -->", 1)[0]
    assert table == sensitive.markdown_table(), "regenerate with: python -m tkbox_daemon.patch.sensitive"


_NAME = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)
_KNOWN = st.sampled_from([path for positives, _ in EXAMPLES.values() for path in positives]
                         + [path for _, negatives in EXAMPLES.values() for path in negatives])
_PATH = st.one_of(_KNOWN, st.lists(_NAME, min_size=1, max_size=4).map("/".join))


def _recase(path: str, flips: list[bool]) -> str:
    return "".join(char.swapcase() if flips[i % len(flips)] else char for i, char in enumerate(path))


@given(_PATH, st.lists(st.booleans(), min_size=1, max_size=16))
def test_case_changes_never_change_the_answer(path, flips):
    assert sensitive_reason(_recase(path, flips)) == sensitive_reason(path)


@given(_PATH, st.lists(_NAME, min_size=1, max_size=3))
def test_a_directory_above_never_makes_a_sensitive_path_plain(path, directories):
    if sensitive_reason(path) is not None:
        assert sensitive_reason("/".join([*directories, path])) is not None


@given(_PATH, st.lists(_NAME, min_size=1, max_size=3))
def test_everything_under_a_sensitive_path_is_sensitive(path, below):
    if sensitive_reason(path) is not None:
        assert sensitive_reason("/".join([path, *below])) is not None
