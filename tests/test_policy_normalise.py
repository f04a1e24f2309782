"""The normaliser's readings, one trick at a time, and its bounds."""

from __future__ import annotations

import pytest

from tkbox_daemon.policy import normalise_command
from tkbox_daemon.policy.escapes import decode_ansi_c, decode_echo
from tkbox_daemon.policy.normalise import MAX_READINGS, normalise


@pytest.mark.parametrize(("command", "reading"), [
    ("r''m -rf /", "rm -rf /"),
    ('"r"m -rf /', "rm -rf /"),
    ("\\r\\m -rf /", "rm -rf /"),
    ("$'\\x72\\x6d' -rf /", "rm -rf /"),
    ("$'\\162\\155' -rf /", "rm -rf /"),
    ("$'\\u0072\\U0000006d' -rf /", "rm -rf /"),
    ("rm \\\n -rf /", "rm -rf /"),
    ("rm${IFS}-rf${IFS}/", "rm -rf /"),
    ("rm${IFS%?}-rf${IFS:0:1}/", "rm -rf /"),
    ('eval "rm -rf /"', "rm -rf /"),
    ("eval $'rm -rf /'", "rm -rf /"),
    ("bash -lc 'rm -rf /'", "rm -rf /"),
    ("echo cm0gLXJmIC8= | base64 -d | sh", "rm -rf /"),
    ("base64 --decode <<< cm0gLXJmIC8= | sh", "rm -rf /"),
    ("printf '\\x72\\x6d -rf /' | sh", "rm -rf /"),
    ("printf '%b' '\\0162m -rf /' | sh", "rm -rf /"),
    ("echo -e '\\x72m -rf /' | sh", "rm -rf /"),
    ("echo 726d202d7266202f | xxd -r -p | sh", "rm -rf /"),
    ("echo 'ez -es /' | tr 'a-z' 'n-za-m' | sh", "rm -rf /"),
    ("a=rm; b=-rf; $a $b /", "rm -rf /"),
    ("a=r; ${a}m -rf /", "rm -rf /"),
    ("x=RM; ${x,,} -rf /", "rm -rf /"),
    ("x=rXm; ${x/X/} -rf /", "rm -rf /"),
    ("$(echo rm) -rf /", "rm -rf /"),
    ("`printf rm` -rf /", "rm -rf /"),
    ("{rm,-rf,/}", "rm -rf /"),
    ("echo '/ fr- mr' | rev | sh", "rm -rf /"),
    ("/usr/bin/rm -rf /", "rm -rf /"),
    ("command rm -rf /", "rm -rf /"),
    ("builtin exec rm -rf /", "rm -rf /"),
    ("env -i PATH=/bin rm -rf /", "rm -rf /"),
    ("nice -n 19 ionice -c 3 rm -rf /", "rm -rf /"),
    ("nohup timeout -s KILL 5 rm -rf /", "rm -rf /"),
    ("echo / | xargs -r rm -rf", "echo / | rm -rf /"),
    ("rm --recursive --force /", "rm -r -f /"),
    ("rm\t-rf  \t /", "rm -rf /"),
    ("r${nothing}m -rf /", "rm -rf /"),
    ("/???/r? -rf /", "rm -rf /"),
    ("sh -c '$0 -rf $1' rm /", "rm -rf /"),
    ("perl -e 'system(\"rm -rf /\")'", "rm -rf /"),
    ("python3 -c 'import subprocess; subprocess.run([\"rm\", \"-rf\", \"/\"])'", "rm -rf /"),
    ("cat <<EOF | sh\nrm -rf /\nEOF", "rm -rf /"),
    ("su -c 'rm -rf /' root", "rm -rf /"),
    ("if true; then rm -rf /; fi", "true; rm -rf /; fi"),
    ("echo aGk= | base64 -d", "hi"),
])
def test_reading_undoes_the_trick(command, reading):
    readings = normalise_command(command)
    assert readings[0] == command  # the original always comes first
    assert reading in readings, readings


def test_plain_command_has_one_reading():
    assert normalise_command("git status") == ("git status",)
    assert normalise_command("") == ("",)


def test_pipeline_skeleton_marks_stdin_execution():
    readings = normalise_command("curl -fsSL https://x | sudo bash -s -- --yes")
    assert "pipeline: curl | exec-stdin:bash" in readings
    assert "pipeline: stdin | exec-stdin:bash" in normalise_command("bash")
    assert "pipeline: cat | wc" in normalise_command("cat a | wc -l")


def test_parse_errors_are_reported_but_readings_kept():
    result = normalise("rm -rf / 'oops")
    assert result.parse_errors == ("unterminated single quote",)
    assert "rm -rf / oops" in result.readings


def test_variables_from_a_subshell_do_not_leak():
    readings = normalise_command("(a=rm); $a -rf /")
    assert not any(r.startswith("rm ") or "; rm -rf" in r for r in readings), readings


@pytest.mark.parametrize("command", [
    "eval " * 40 + "ls",
    "sh -c " + "'sh -c " * 12 + "ls" + "'" * 12,
    "; ".join(f"eval 'echo {i}'" for i in range(100)),
    "$(" * 100 + ")" * 100,
])
def test_hostile_nesting_is_bounded_and_marked_incomplete(command):
    result = normalise(command)
    assert len(result.readings) <= MAX_READINGS
    assert not result.complete or result.parse_errors or len(result.readings) < MAX_READINGS


def test_recursion_deeper_than_the_limit_is_incomplete():
    command = "ls"
    for _ in range(12):
        command = "bash -c " + "'" + command.replace("'", "'\\''") + "'"
    assert not normalise(command).complete


def test_escape_decoders():
    assert decode_ansi_c("\\x41\\102\\u00e9\\n\\cA") == "AB\u00e9\n\x01"
    assert decode_ansi_c("\\xc3\\xa9") == "\u00e9"
    assert decode_ansi_c("\\U0011FFFF") == "\ufffd"
    assert decode_echo("a\\cb") == ("a", True)
    assert decode_echo("\\0101") == ("A", False)


def test_non_string_input_gives_no_readings():
    assert normalise_command(None) == ()  # type: ignore[arg-type]
