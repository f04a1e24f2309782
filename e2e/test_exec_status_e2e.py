"""``tkbox exec`` against real boxes on both backends (real signer, daemon, guest): every form of refused
environment name exits 126 naming its rule, and a command that never ran exits as a shell says: 127 when its
program is not found, 126 when it cannot be executed, 126 saying "denied" when the policy denies it."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e.daemon_process import daemon_process, events, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json

pytestmark = pytest.mark.e2e

# Each form of rule (docs/exec-env.md): the name given, and what the refusal must name.
REFUSED_FORMS = [
    ("LOCPATH", "rule LOCPATH,", "set it in the command itself"),                   # exact: glibc's list
    ("LD_PRELOAD", "rule LD_*,", "set it in the command itself"),                   # prefix
    ("BASH_FUNC_greet", "rule BASH_FUNC_*,", "set it in the command itself"),       # prefix
    ("npm_config_registry", "rule npm_config_* in any case", "set it in the command itself"),  # any case
    ("NPM_CONFIG_REGISTRY", "rule npm_config_* in any case", "set it in the command itself"),
    ("Npm_Config_Registry", "rule npm_config_* in any case", "set it in the command itself"),
    ("Http_Proxy", "rule *_proxy in any case", "drop -e Http_Proxy"),              # suffix, any case
    ("ftp_proxy", "rule *_proxy in any case", "drop -e ftp_proxy"),
    ("HTTPS_PROXY", "set by tkbox", "drop -e HTTPS_PROXY"),                          # one tkbox sets itself
]


@pytest.fixture(params=["bwrap", "ns"])
def box(request, tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend=request.param) as daemon:
        info = tkbox_json("run", "--name", "e2e", "--workspace", str(make_checkout(tmp_path)))
        assert info["state"] == "running"
        yield daemon
    tkbox("signer", "down", check=False)


def run(*argv: str, env: tuple[str, ...] = (), json_output: bool = False) -> subprocess.CompletedProcess[str]:
    options = [word for item in env for word in ("-e", item)] + (["--json"] if json_output else [])
    return subprocess.run([TKBOX, "exec", *options, "e2e", "--", *argv], input="", capture_output=True, text=True,
                          timeout=120)


def _one_line(text: str) -> str:
    return " ".join(text.split())  # the message is one line; a terminal may not be


def test_every_form_of_refused_name_exits_126_naming_the_variable_the_rule_and_the_fix(box):
    for name, rule, fix in REFUSED_FORMS:
        refused = run("sh", "-c", "echo ran", env=(f"{name}=x",))
        said = _one_line(refused.stderr)
        assert refused.returncode == 126, (name, refused.stderr)
        assert refused.stdout == "" and name in said and rule in said and fix in said, said
    shellshock = run("sh", "-c", "echo ran", env=("MY_FLAG=() { :; }; echo pwned",))
    assert shellshock.returncode == 126 and "MY_FLAG" in shellshock.stderr and "Shellshock" in shellshock.stderr
    as_json = run("true", env=("Npm_Config_Registry=x",), json_output=True)
    assert as_json.returncode == 126 and json.loads(as_json.stdout)["error"]["code"] == "exec_refused"
    assert not [e for e in events("e2e") if e["kind"] in ("exec.started", "exec.denied")]  # none reached a decision
    # What no program reads that way is the command's own: lower-case LD_ names, an application's names.
    kept = run("sh", "-c", 'echo "$ld_preload $MY_APP_FLAG"', env=("ld_preload=kept", "MY_APP_FLAG=1"))
    assert kept.returncode == 0 and kept.stdout == "kept 1\n", kept.stderr


def test_not_found_exits_127_cannot_execute_126_and_a_denial_126_each_saying_which(box):
    missing = run("tkbox-no-such-program", "--flag")
    assert missing.returncode == 127, missing.stderr
    said = _one_line(missing.stderr)
    assert "program not found: 'tkbox-no-such-program'" in said and "the box's guest reports ENOENT" in said
    assert "PATH" in said and "denied by" not in said
    assert run("/workspace/no/such/file").returncode == 127
    as_json = run("tkbox-no-such-program", json_output=True)
    assert as_json.returncode == 127 and json.loads(as_json.stdout)["error"]["code"] == "program_not_found"

    made = run("sh", "-c", "printf '#!/nonexistent/interpreter\\n' > /workspace/script && "
                           "printf '\\001\\002 not a program\\n' > /workspace/garbage && "
                           "chmod 755 /workspace/script /workspace/garbage")
    assert made.returncode == 0, made.stderr
    cases = [("/workspace/tracked.txt", 126, "EACCES", "cannot execute"),
             ("/workspace", 126, "EACCES", "is a directory"),
             ("/workspace/garbage", 126, "ENOEXEC", "not a program"),
             ("/workspace/script", 127, "ENOENT", "interpreter")]  # as bash: "required file not found", 127
    for program, status, code, words in cases:
        result = run(program)
        said = _one_line(result.stderr)
        assert result.returncode == status, (program, said)
        assert said.startswith("tkbox exec: ") and "denied by" not in said, said  # not the policy's denial
        assert f"the box's guest reports {code}" in said and words in said, said

    denied = run("pkill", "-f", "tkbox signer")
    assert denied.returncode == 126 and denied.stderr.startswith("tkbox: denied by TK-D007")

    finished = [e["data"] for e in events("e2e") if e["kind"] == "exec.finished"]
    missing_end = next(f for f in finished if "tkbox-no-such-program --flag" in f["command"])
    assert (missing_end["exit_code"], missing_end["reported_by"]) == (127, "guest")
    assert missing_end["host"]["outcome"] == "start_failed"
