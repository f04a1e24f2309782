"""The per-exec environment rules: each form (exact, prefix, suffix, any case) refuses what its program reads and
nothing else, glibc's and sudo's lists are covered whole, and docs/exec-env.md is the table the code enforces."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.doors.commands import ExecRefused, ExecRequest, check_request
from tkbox_daemon.rules import (
    EGRESS_PROXY_URL,
    HARMLESS_ENV_NAMES,
    PROXY_ENV,
    REFUSED_ENV_RULES,
    env_rules_markdown,
    refused_env_reason,
    refused_env_value_reason,
    refusing_rule,
)

ROOT = Path(__file__).resolve().parents[1]

# glibc's UNSECURE_ENVVARS (sysdeps/generic/unsecvars.h) at bminor/glibc 04e750e75b73 (2.42.9000, January 2026),
# plus the names earlier releases listed (LD_HWCAP_MASK until 2.40, LD_USE_LOAD_BIAS): copied here, not derived.
GLIBC_UNSECURE_ENVVARS = (
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LD_AUDIT", "LD_BIND_NOT", "LD_BIND_NOW",
    "LD_DEBUG", "LD_DEBUG_OUTPUT", "LD_DYNAMIC_WEAK", "LD_LIBRARY_PATH", "LD_ORIGIN_PATH", "LD_PRELOAD",
    "LD_PROFILE", "LD_PROFILE_OUTPUT", "LD_SHOW_AUXV", "LD_VERBOSE", "LD_WARN", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_PERTURB_",
    "MALLOC_TOP_PAD_", "MALLOC_TRACE", "MALLOC_TRIM_THRESHOLD_", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF",
    "RES_OPTIONS", "TMPDIR", "TZDIR",
    "LD_HWCAP_MASK", "LD_USE_LOAD_BIAS",
)

# sudo's initial_badenv_table (plugins/sudoers/env.c) at sudo-project/sudo 2e18923c2e95, every platform's entries;
# a '*' is sudo's glob.  Its "*=()*" (a bash function in the value) is tested on values below.
SUDO_BADENV_TABLE = (
    "IFS", "CDPATH", "LOCALDOMAIN", "RES_OPTIONS", "HOSTALIASES", "NLSPATH", "PATH_LOCALE", "LD_*", "_RLD*",
    "SHLIB_PATH", "LDR_*", "LIBPATH", "AUTHSTATE", "DYLD_*", "KRB5_CONFIG*", "KRB5_KTNAME", "VAR_ACE", "USR_ACE",
    "DLC_ACE", "TERMINFO", "TERMINFO_DIRS", "TERMPATH", "TERMCAP", "ENV", "BASH_ENV", "PS4", "GLOBIGNORE",
    "BASHOPTS", "SHELLOPTS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH", "PERLIO_DEBUG", "PERLLIB",
    "PERL5LIB", "PERL5OPT", "PERL5DB", "FPATH", "NULLCMD", "READNULLCMD", "ZDOTDIR", "TMPPREFIX", "PYTHONHOME",
    "PYTHONPATH", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONSTARTUP", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS",
    "NODE_PATH", "GIT_SSH_COMMAND", "GIT_CONFIG_*", "GCONV_PATH",
)

NAME_TAIL = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_", max_size=20)
NAME_HEAD = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
ANY_CASE_RULES = [rule for rule in REFUSED_ENV_RULES if rule.any_case]
PREFIX_RULES = [rule for rule in REFUSED_ENV_RULES if rule.form == "prefix" and not rule.any_case]
EXACT_CASE_RULES = [rule for rule in REFUSED_ENV_RULES if not rule.any_case]


def _refused(name: str, value: str = "1") -> ExecRefused:
    with pytest.raises(ExecRefused) as refused:
        check_request(ExecRequest(argv=("true",), env={name: value}))
    assert refused.value.rule == "env" and refused.value.exit_code == 126
    return refused.value


def _accepted(name: str) -> None:
    check_request(ExecRequest(argv=("true",), env={name: "1"}))


def _recase(text: str, flips: list[bool]) -> str:
    flips = (flips + [False] * len(text))[: len(text)]
    return "".join(char.swapcase() if flip else char for char, flip in zip(text, flips, strict=True))


# ---- each form --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["LOCPATH", "TZDIR", "NIS_PATH", "RESOLV_HOST_CONF", "PATH", "GLOBIGNORE"])
def test_an_exact_rule_refuses_its_name(name):
    assert name in str(_refused(name))


@pytest.mark.parametrize("name", ["LOCPATH_X", "XLOCPATH", "locpath", "Path", "ld_preload", "home", "pythonpath"])
def test_an_exact_case_rule_leaves_other_names_and_cases_that_no_program_reads(name):
    _accepted(name)


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_", "LD_FUTURE_KNOB", "DYLD_INSERT_LIBRARIES", "BASH_FUNC_x",
                                  "MALLOC_ARENA_MAX", "KRB5_CONFIG_FILE", "_RLD_ARGS", "GIT_CONFIG_COUNT"])
def test_a_prefix_rule_refuses_every_name_that_starts_so(name):
    _refused(name)


@pytest.mark.parametrize("name", ["npm_config_registry", "NPM_CONFIG_REGISTRY", "Npm_Config_Registry",
                                  "nPm_CoNfIg_UsErCoNfIg", "yarn_yarn_path", "YARN_PLUGINS", "Yarn_Rc_Filename",
                                  "pnpm_config_store_dir", "PNPM_CONFIG_STORE_DIR"])
def test_an_any_case_prefix_rule_refuses_every_case(name):
    message = str(_refused(name))
    assert name in message and "in any case" in message


@pytest.mark.parametrize("name", ["Http_Proxy", "hTTPS_pROXY", "ftp_proxy", "SOCKS_PROXY", "All_Proxy", "No_Proxy",
                                  "RSYNC_PROXY", "x_proxy"])
def test_a_name_python_reads_as_a_proxy_is_refused_in_any_case_naming_the_boxs_proxy(name):
    message = str(_refused(name))
    assert name in message and EGRESS_PROXY_URL in message and f"drop -e {name}" in message


@pytest.mark.parametrize("name", ["npm_configregistry", "npm_package_name", "proxy", "MYPROXY", "proxy_url",
                                  "CI", "TERM", "LANG", "LC_ALL", "TZ", "COLUMNS", "RUST_LOG", "NO_COLOR"])
def test_names_no_rule_covers_are_accepted(name):
    _accepted(name)


@pytest.mark.parametrize("name", sorted(PROXY_ENV))
def test_the_proxy_names_tkbox_sets_are_refused_as_set_by_tkbox(name):
    message = str(_refused(name))
    assert "set by tkbox" in message and PROXY_ENV[name] in message


def test_a_refusal_names_the_variable_the_rule_its_reader_and_the_fix():
    message = str(_refused("LOCPATH"))
    assert "-e LOCPATH" in message and "rule LOCPATH" in message and "glibc" in message
    assert "tkbox exec BOX -- env LOCPATH=VALUE PROGRAM" in message
    message = str(_refused("Npm_Config_Registry"))
    assert "rule npm_config_* in any case" in message and "read by npm" in message


def test_an_invalid_name_is_refused_as_one():
    assert "not a valid environment variable name" in str(_refused("A-B"))
    assert "not a valid environment variable name" in str(_refused("BASH_FUNC_f%%"))


@pytest.mark.parametrize("value", ["() { :; }; id", "()", "(){ x; }"])
def test_a_value_bash_would_import_as_a_function_is_refused(value):
    assert refused_env_value_reason("ANY", value) is not None
    assert "Shellshock" in str(_refused("ANY", value))


@pytest.mark.parametrize("value", ["", "x", " () {", "f()", "a=()"])
def test_other_values_pass(value):
    assert refused_env_value_reason("ANY", value) is None


# ---- upstream lists ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", GLIBC_UNSECURE_ENVVARS)
def test_every_name_glibc_removes_from_setuid_programs_is_refused(name):
    _refused(name)


@pytest.mark.parametrize("pattern", SUDO_BADENV_TABLE)
def test_every_entry_of_sudos_bad_environment_table_is_refused(pattern):
    base = pattern.rstrip("*")
    _refused(base)
    if pattern.endswith("*"):
        _refused(base + "ANYTHING_MORE")


def test_harmless_names_are_exact_and_each_is_under_a_rule_it_is_excepted_from():
    for name in HARMLESS_ENV_NAMES:
        assert refused_env_reason(name) is None
        assert any(rule.matches(name) for rule in REFUSED_ENV_RULES), f"{name} needs no exception"
        assert refused_env_reason(name.lower()) is None or name.lower() not in HARMLESS_ENV_NAMES


# ---- properties -------------------------------------------------------------------------------------------------

@given(data=st.data())
def test_every_case_of_a_name_an_any_case_rule_covers_is_refused(data):
    rule = data.draw(st.sampled_from(ANY_CASE_RULES), label="rule")
    flips = data.draw(st.lists(st.booleans(), max_size=len(rule.text)), label="flips")
    text = _recase(rule.text, flips)
    name = text + data.draw(NAME_TAIL, label="tail") if rule.form == "prefix" else data.draw(NAME_HEAD) + text
    reason = refused_env_reason(name)
    assert reason is not None and name in reason


@given(data=st.data())
def test_every_name_a_prefix_rule_starts_is_refused_unless_it_is_a_harmless_one(data):
    rule = data.draw(st.sampled_from(PREFIX_RULES), label="rule")
    name = rule.text + data.draw(NAME_TAIL, label="tail")
    assert (refused_env_reason(name) is None) == (name in HARMLESS_ENV_NAMES)


@given(data=st.data())
def test_another_case_of_an_exact_case_name_is_refused_only_by_a_rule_that_ignores_case(data):
    rule = data.draw(st.sampled_from(EXACT_CASE_RULES), label="rule")
    flips = data.draw(st.lists(st.booleans(), min_size=1, max_size=len(rule.text)), label="flips")
    variant = _recase(rule.text, flips)
    if variant == rule.text:  # flips of digits and underscores change nothing
        return
    other = refusing_rule(variant)
    assert other is None or other.any_case or other.text != rule.text


@given(name=st.from_regex(r"[a-z][a-z0-9]{0,40}", fullmatch=True))
def test_lower_case_names_without_an_underscore_are_accepted(name):
    # Every rule that ignores case has an underscore in it, and every exact-case rule is upper case.
    assert refused_env_reason(name) is None


@given(tail=st.from_regex(r"[A-Z0-9_]{0,30}", fullmatch=True).filter(lambda t: not t.lower().endswith("_proxy")))
def test_an_application_s_own_names_are_accepted(tail):
    assert refused_env_reason("MY_APP_" + tail) is None


@given(name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,60}", fullmatch=True))
def test_a_refusal_always_names_the_variable_and_what_to_do(name):
    reason = refused_env_reason(name)
    if reason is not None:
        assert name in reason and ("set it in the command itself" in reason or f"drop -e {name}" in reason)


# ---- docs -------------------------------------------------------------------------------------------------------

def test_the_env_table_in_the_docs_is_the_one_the_code_enforces():
    text = (ROOT / "docs" / "exec-env.md").read_text()
    table = text.split("<!-- env-rules:begin -->\n", 1)[1].split("<!-- env-rules:end -->", 1)[0]
    assert table == env_rules_markdown(), "regenerate with: python -m tkbox_daemon.rules"


def test_every_rule_has_a_family_the_docs_explain():
    text = (ROOT / "docs" / "exec-env.md").read_text()
    for rule in REFUSED_ENV_RULES:
        assert f"### {rule.family}\n" in text
