"""Exit statuses of a command that never ran, as the shell has them: 127 when its program is not found, 126 when it
exists but cannot be executed, 126 for a refusal or a denial (each message says which).

The guest's words come from real ``execve`` failures; the daemon's mapping is checked alone and then through the
in-process daemon with the real guest (the unisolated test backend); ``tkbox exec``'s status through its driver.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.daemon_harness import make_workspace, run_exec, running_daemon
from tests.exec_fakes import ScriptedExec
from tkbox_daemon.doors.commands import EXIT_NOT_FOUND, EXIT_REFUSED, start_refusal
from tkbox_guest.start_errors import StartError, popen_failure
from tkbox_tui.cli.exec_command import drive_exec
from tkbox_tui.cli.report import CliError

HOST_CWD = "/tmp"  # the unisolated test backend runs on the host: no /workspace there
PATH = {"PATH": "/usr/bin:/bin"}


def _files(base: Path) -> dict[str, Path]:
    """A text file, a directory, an executable that is no program, a script whose interpreter is missing."""
    text = base / "notes.txt"
    text.write_text("not a program\n")
    garbage = base / "garbage"
    garbage.write_bytes(b"\x01\x02 no #! line, no ELF header\n")
    script = base / "script"
    script.write_text("#!/nonexistent/interpreter\necho hi\n")
    for path in (garbage, script):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"text": text, "dir": base, "garbage": garbage, "script": script}


def _start(argv: list[str], cwd: str, env: dict[str, str] | None = None) -> StartError:
    env = env if env is not None else PATH
    try:
        process = subprocess.Popen(argv, cwd=cwd, env=env, close_fds=True)
    except OSError as exc:
        return popen_failure(exc, argv[0], cwd, env)
    process.kill()
    process.wait()
    raise AssertionError(f"{argv} started")


# ---- the guest's words, from real execve failures ----------------------------------------------------------------

def test_a_program_in_no_directory_of_the_path_is_enoent_and_says_so(tmp_path):
    error = _start(["tkbox-no-such-program"], str(tmp_path))
    assert error.code == "ENOENT" and "tkbox-no-such-program" in str(error) and "PATH" in str(error)


def test_a_missing_path_is_enoent(tmp_path):
    error = _start(["./missing"], str(tmp_path))
    assert error.code == "ENOENT" and "./missing" in str(error)


def test_a_script_whose_interpreter_is_missing_is_enoent_and_says_the_file_exists(tmp_path):
    files = _files(tmp_path)
    error = _start([str(files["script"])], str(tmp_path))
    assert error.code == "ENOENT" and "exists" in str(error) and "#!" in str(error)


@pytest.mark.parametrize("kind, code, words", [("text", "EACCES", "not executable"), ("dir", "EACCES", "directory"),
                                               ("garbage", "ENOEXEC", "not a program")])
def test_a_file_that_cannot_be_executed_says_why(tmp_path, kind, code, words):
    files = _files(tmp_path)  # root too needs an x bit to exec a file
    error = _start([str(files[kind])], str(tmp_path))
    assert error.code == code and words in str(error)


def test_a_working_directory_that_cannot_be_entered_is_named_as_such(tmp_path):
    error = _start(["true"], str(tmp_path / "gone"))
    assert error.code == "CWD_ENOENT" and "working directory" in str(error) and "gone" in str(error)


# ---- the daemon's mapping -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("code, status, api_code, rule", [
    ("ENOENT", 127, "program_not_found", "not_found"),
    ("EACCES", 126, "cannot_execute", "not_executable"),
    ("ENOEXEC", 126, "cannot_execute", "not_executable"),
    ("EISDIR", 126, "cannot_execute", "not_executable"),
    ("ENOTDIR", 126, "cannot_execute", "not_executable"),
    ("CWD_ENOENT", 126, "exec_refused", "cwd"),
    ("EAGAIN", 126, "exec_refused", "start"),
    ("ESHUTDOWN", 126, "exec_refused", "start"),
])
def test_the_guests_code_becomes_the_shells_status(code, status, api_code, rule):
    refused = start_refusal("prog", code, "words")
    assert (refused.exit_code, refused.code, refused.rule, refused.reported_by) == (status, api_code, rule, "guest")
    assert f"the box's guest reports {code}: words" in str(refused)


@given(code=st.from_regex(r"[A-Z][A-Z0-9_]{0,31}", fullmatch=True), program=st.text(min_size=1, max_size=400),
       words=st.text(max_size=200))
def test_only_a_program_not_found_ends_127_and_the_message_is_the_guests_word(code, program, words):
    refused = start_refusal(program, code, words)
    assert refused.exit_code == (EXIT_NOT_FOUND if code == "ENOENT" else EXIT_REFUSED)
    assert refused.reported_by == "guest" and f"the box's guest reports {code}: {words}" in str(refused)
    assert len(str(refused)) <= 1000 + len(words)  # the program is shown cut, however long


# ---- through the daemon, with the real guest ------------------------------------------------------------------------

async def _records(daemon: Any, run_id: str) -> list[dict[str, Any]]:
    service = daemon.signer.service
    await service.store.drain()
    return [record.event for record in service.run_records(service.book.runs[run_id])]


async def test_a_program_not_found_ends_127_recorded_as_the_guests_word(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        result = await run_exec(client, "t1", ["tkbox-no-such-program", "x"], cwd=HOST_CWD)
        end = result["end"]
        assert end["type"] == "error" and end["code"] == "program_not_found" and end["exit_code"] == 127
        assert end["reported_by"] == "guest" and "program not found: 'tkbox-no-such-program'" in end["message"]
        [kept] = await client.execs("t1")
        assert (kept.state, kept.exit_code, kept.reported_by) == ("failed", 127, "guest")
        await client.remove_box("t1")
        [completion] = [r["data"] for r in await _records(daemon, info.run_id) if r["type"] == "tool.result"]
        assert completion["exit_code"] == 127 and completion["reported_by"] == "guest"
        assert completion["status"] == "error" and completion["host"]["outcome"] == "start_failed"


async def test_a_file_that_cannot_be_executed_ends_126_and_a_bad_cwd_126_naming_it(tmp_path):
    (tmp_path / "files").mkdir()
    files = _files(tmp_path / "files")
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        text = (await run_exec(client, "t1", [str(files["text"])], cwd=HOST_CWD))["end"]
        assert (text["code"], text["exit_code"]) == ("cannot_execute", 126)
        assert "cannot execute" in text["message"] and "EACCES" in text["message"]
        cwd = (await run_exec(client, "t1", ["true"], cwd=str(tmp_path / "gone")))["end"]
        assert (cwd["code"], cwd["exit_code"], cwd["rule"]) == ("exec_refused", 126, "cwd")
        assert "working directory" in cwd["message"]
        denied = (await run_exec(client, "t1", ["pkill", "-f", "tkbox signer"], cwd=HOST_CWD))["end"]
        assert denied["type"] == "denied" and denied["exit_code"] == 126


# ---- tkbox exec's status ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("message, status", [
    ({"code": "program_not_found", "exit_code": 127}, 127),
    ({"code": "cannot_execute", "exit_code": 126}, 126),
    ({"code": "exec_refused", "exit_code": 126}, 126),
    ({"code": "exec_refused"}, 126),  # an older daemon: refused is 126
    ({"code": "program_not_found", "exit_code": 0}, 126),  # a refusal never exits 0
    ({"code": "guest_failed", "exit_code": 127}, 2),  # a failure is not a refusal
])
def test_tkbox_exec_exits_with_the_refusals_status(message, status):
    call = ScriptedExec([{"type": "error", "message": "words", **message}])
    with pytest.raises(CliError) as error:
        drive_exec(call, stream=False)
    assert error.value.status == status and error.value.code == message["code"]
