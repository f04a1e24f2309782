"""The command door's rules: the decided command line names what runs, refused env names, stdin fields.

Every form of env rule, and the upstream lists it covers, is tested in tests/test_exec_env_rules.py."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.doors.commands import (
    SHELL_RESERVED_WORDS,
    ExecRefused,
    ExecRequest,
    check_request,
    command_line,
    decision_args,
)
from tkbox_daemon.rules import HARMLESS_ENV_NAMES, REFUSED_ENV_RULES

# Disable every builtin, empty PATH: any command then goes to command_not_found_handle with its argv intact,
# so bash itself tells us the argv it would run.
BASH_ARGV_PROBE = r"""
for name in $(compgen -b); do case $name in enable) ;; *) enable -n "$name" ;; esac; done
enable -n enable
command_not_found_handle() { /usr/bin/printf '%s\0' "$@"; }
"""


def argv_bash_runs(line: str) -> list[str]:
    result = subprocess.run(
        ["/bin/bash", "--norc", "--noprofile", "-c", BASH_ARGV_PROBE + line],
        capture_output=True, env={"PATH": "/nonexistent"}, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return [part.decode("utf-8", "surrogateescape") for part in result.stdout.split(b"\0")[:-1]]


text_word = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=0, max_size=12
)
tricky_first = st.sampled_from(sorted(SHELL_RESERVED_WORDS) + ["A=b", "x=", "=", "a=b=c", "PATH=x", "!x", "~", "-",
                                                              "#c", "a b", "$(id)", "`id`", "*", "{a,b}"])
program = st.one_of(tricky_first, text_word.filter(lambda w: w and "/" not in w and not w.startswith("%")))


@given(first=program, rest=st.lists(text_word, max_size=5))
def test_bash_parses_the_decided_command_line_back_to_exactly_the_argv_that_runs(first, rest):
    argv = [first, *rest]
    assert argv_bash_runs(command_line(argv)) == argv


@given(first=program.filter(lambda w: "=" not in w), rest=st.lists(text_word, max_size=4),
       env=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), text_word, max_size=3))
def test_with_an_environment_bash_runs_env_with_the_assignments_then_the_argv(first, rest, env):
    argv = [first, *rest]
    expected = ["env", *[f"{k}={v}" for k, v in sorted(env.items())], *argv] if env else argv
    assert argv_bash_runs(command_line(argv, env)) == expected


@pytest.mark.parametrize("word", ["if", "time", "!", "{", "[[", "A=b"])
def test_a_first_word_a_shell_would_not_run_is_quoted(word):
    assert command_line([word, "x"]).startswith("'")


def test_a_job_spec_first_word_is_refused():
    with pytest.raises(ExecRefused, match="job spec"):
        check_request(ExecRequest(argv=("%1",)))


@pytest.mark.parametrize("name", ["LD_PRELOAD", "GIT_SSH_COMMAND", "PYTHONPATH", "NODE_OPTIONS", "BASH_ENV",
                                  "BASH_FUNC_x%%", "PATH", "HOME", "PS4", "IFS", "ENV", "PROMPT_COMMAND",
                                  "RUSTC_WRAPPER", "CC", "MAKEFLAGS", "GIT_DIR"])
def test_environment_names_that_change_what_runs_are_refused_by_name(name):
    with pytest.raises(ExecRefused) as refused:
        check_request(ExecRequest(argv=("make",), env={name: "x"}))
    assert refused.value.rule == "env"
    assert name.split("%")[0] in str(refused.value) or "not a valid" in str(refused.value)


@pytest.mark.parametrize("name", sorted(HARMLESS_ENV_NAMES) + ["CI", "TERM", "LANG", "MY_FLAG"])
def test_harmless_environment_names_pass(name):
    check_request(ExecRequest(argv=("make",), env={name: "1"}))


def test_every_refused_rule_refuses_a_name_it_covers():
    for rule in REFUSED_ENV_RULES:
        name = {"prefix": rule.text + "X", "suffix": "X" + rule.text}.get(rule.form, rule.text)
        if name in HARMLESS_ENV_NAMES:
            continue
        with pytest.raises(ExecRefused):
            check_request(ExecRequest(argv=("true",), env={name: "1"}))


def test_a_value_old_bash_would_import_as_a_function_is_refused_under_any_name():
    with pytest.raises(ExecRefused, match=r"MY_FLAG.*\(\)") as refused:
        check_request(ExecRequest(argv=("bash", "-c", "true"), env={"MY_FLAG": "() { :; }; id"}))
    assert refused.value.rule == "env" and refused.value.exit_code == 126
    check_request(ExecRequest(argv=("true",), env={"MY_FLAG": "x () {}"}))


def test_stdin_known_up_front_is_decided_by_digest_size_and_short_text():
    args = decision_args(ExecRequest(argv=("cat",), stdin=b"hello\n"))
    assert args["stdin_sha256"] == "sha256:" + hashlib.sha256(b"hello\n").hexdigest()
    assert args["stdin_bytes"] == 6 and args["stdin_text"] == "hello\n"
    binary = decision_args(ExecRequest(argv=("cat",), stdin=b"\xff\xfe"))
    assert "stdin_text" not in binary and binary["stdin_bytes"] == 2
    large = decision_args(ExecRequest(argv=("cat",), stdin=b"a" * 5000))
    assert "stdin_text" not in large


def test_stdin_over_the_up_front_limit_is_refused_with_the_limit_named():
    with pytest.raises(ExecRefused, match="stdin_upfront"):
        check_request(ExecRequest(argv=("cat",), stdin=b"a" * (1024 * 1024 + 1)))


def test_the_environment_leads_the_decided_command():
    args = decision_args(ExecRequest(argv=("make", "test"), env={"CI": "1", "MODE": "a b"}))
    assert args["command"] == "env CI=1 MODE='a b' make test"


@pytest.mark.parametrize("argv, fragment", [((), "needs a program"), (("a\0b",), "NUL"), (("",), "empty")])
def test_bad_argv_is_refused_with_a_reason(argv, fragment):
    with pytest.raises(ExecRefused, match=fragment):
        check_request(ExecRequest(argv=argv))


def test_a_relative_cwd_is_refused():
    with pytest.raises(ExecRefused, match="absolute"):
        check_request(ExecRequest(argv=("ls",), cwd="workspace"))
