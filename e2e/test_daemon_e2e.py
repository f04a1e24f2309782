"""Boxes end to end: the real signer, the real ``tkbox daemon``, real bubblewrap boxes and the real guest agent."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from e2e.daemon_process import daemon_process, events, make_checkout, next_event
from e2e.signer_process import TKBOX, tkbox, tkbox_json

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["bwrap", "ns"])
def box(request, tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend=request.param) as daemon:
        checkout = make_checkout(tmp_path)
        info = tkbox_json("run", "--name", "e2e", "--workspace", str(checkout))
        assert info["state"] == "running" and info["run_id"]
        yield {"daemon": daemon, "info": info, "checkout": checkout}
    tkbox("signer", "down", check=False)


def run(*argv: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([TKBOX, "exec", "e2e", "--", *argv], input=stdin if stdin is not None else b"",
                          capture_output=True, timeout=timeout)


def test_exec_runs_the_command_and_returns_its_status(box):
    ok = run("cat", "/workspace/tracked.txt")
    assert ok.returncode == 0 and ok.stdout == b"tracked\n"
    failing = run("sh", "-c", "echo oops >&2; exit 3")
    assert failing.returncode == 3 and failing.stderr.endswith(b"oops\n")
    kinds = [event["kind"] for event in events("e2e")]
    assert kinds.count("exec.started") == 2 and kinds.count("exec.finished") == 2


def test_a_command_aimed_at_the_signer_is_denied_with_126_and_the_rule(box):
    denied = run("pkill", "-f", "tkbox signer")
    assert denied.returncode == 126
    assert b"TK-D007" in denied.stderr
    assert events("e2e")[-1]["kind"] == "exec.denied"


def test_the_workspace_has_tracked_files_but_no_git_and_no_env(box):
    listing = run("ls", "-a", "/workspace")
    names = set(listing.stdout.decode().split())
    assert {"tracked.txt", "untracked.txt", ".gitignore"} <= names
    assert ".env" not in names and ".git" not in names


def test_the_box_has_no_network_card(box):
    devices = run("cat", "/proc/net/dev").stdout.decode()
    interfaces = [line.split(":")[0].strip() for line in devices.splitlines()[2:]]
    assert interfaces == ["lo"]
    probe = run("/usr/bin/python3", "-c", (
        "import socket, errno\n"
        "s = socket.socket()\n"
        "try:\n    s.connect(('192.0.2.1', 9))\nexcept OSError as e:\n    print('connect', e.errno)\n"
        "try:\n    socket.socket(40, socket.SOCK_STREAM)\nexcept OSError as e:\n    print('vsock', e.errno)\n"))
    import errno

    assert f"connect {errno.ENETUNREACH}".encode() in probe.stdout
    assert f"vsock {errno.EAFNOSUPPORT}".encode() in probe.stdout


def test_the_box_runs_as_a_non_root_host_uid_and_cannot_read_host_files(box, tmp_path):
    pid = tkbox_json("ls")[0]["pid"]
    with open(f"/proc/{pid}/status") as status:
        uid_line = next(line for line in status if line.startswith("Uid:"))
    assert all(int(uid) >= 100000 for uid in uid_line.split()[1:])
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only\n")
    os.chmod(secret, 0o644)
    attempt = run("cat", str(secret))
    assert attempt.returncode != 0 and b"host only" not in attempt.stdout
    assert run("cat", "/etc/shadow").returncode != 0


def _unread_stdin_exec(tmp_path) -> subprocess.Popen[bytes]:
    payload = tmp_path / "two-megabytes"
    payload.write_bytes(b"z" * (2 * 1024 * 1024))
    handle = open(payload, "rb")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen([TKBOX, "exec", "e2e", "--stdin", "stream", "--", "sleep", "600"], stdin=handle,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    handle.close()
    next_event("exec.started", "e2e")
    return process


def test_unread_stdin_interrupt_stops_the_process(box, tmp_path):
    process = _unread_stdin_exec(tmp_path)
    process.send_signal(signal.SIGINT)
    assert process.wait(60) == 130
    finished = [e for e in events("e2e") if e["kind"] == "exec.finished"][-1]
    assert finished["data"]["signal"] == signal.SIGINT


def test_unread_stdin_kill_of_the_client_stops_the_process(box, tmp_path):
    process = _unread_stdin_exec(tmp_path)
    process.kill()
    process.wait(60)
    finished = next_event("exec.finished", "e2e")
    assert finished["data"]["signal"] == signal.SIGKILL


def test_stop_saves_the_patch_and_rm_closes_the_run(box):
    run("sh", "-c", "echo changed > /workspace/tracked.txt; echo new > /workspace/new.txt")
    tkbox("stop", "e2e")
    patch = tkbox("diff", "e2e").stdout
    assert "+changed" in patch and "new.txt" in patch
    assert (box["checkout"] / "tracked.txt").read_text() == "tracked\n"  # the checkout is untouched
    tkbox("rm", "e2e")
    assert tkbox_json("ls") == []


def test_the_signer_killed_mid_run_makes_the_next_exec_refused(box):
    status = tkbox_json("signer", "status")
    os.kill(status["pid"], signal.SIGKILL)
    refused = run("echo", "should not run")
    assert refused.returncode == 126 and b"should not run" not in refused.stdout
    assert b"TK-SIGNER-UNAVAILABLE" in refused.stderr
    kinds = [event["kind"] for event in events("e2e")]
    assert "signer.unavailable" in kinds


def test_hold_pauses_and_quarantine_kills_the_box(box):
    from tkbox_daemon.signer.client import SignerClient, new_request_id
    from tkbox_daemon.signer.paths import SignerPaths

    run_id = box["info"]["run_id"]
    with SignerClient(SignerPaths.from_env().socket) as signer:
        signer.call("hold", request_id=new_request_id(), run_id=run_id, reason="operator looks")
        held = next_event("box.held", "e2e")
        assert held["data"]["state"] == "held"
        assert run("true").returncode != 0
        signer.call("quarantine", request_id=new_request_id(), run_id=run_id, reason="incident")
    failed = next_event("box.failed", "e2e")
    assert "quarantined" in failed["data"]["reason"]
    assert tkbox_json("ls")[0]["pid"] is None


def test_the_daemon_refuses_to_start_without_a_signer(tmp_path):
    result = subprocess.run([TKBOX, "daemon"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "tkbox signer up" in result.stderr and "--unrecorded" in result.stderr


def test_daemon_shutdown_stops_every_box_closes_every_run_and_loses_no_event(box):
    from tkbox_daemon.signer.client import SignerClient, SignerError, new_request_id
    from tkbox_daemon.signer.paths import SignerPaths

    run("echo", "before shutdown")
    before = events()
    assert box["daemon"].stop() == 0
    from tkbox_daemon.config import DaemonPaths

    lines = (DaemonPaths.from_env().state_dir / "events.jsonl").read_text().splitlines()
    stored = [json.loads(line) for line in lines]
    seqs = [event["seq"] for event in stored]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no repeat
    assert [e["seq"] for e in before] == seqs[: len(before)]
    kinds = [event["kind"] for event in stored[len(before):]]
    assert "daemon.stopping" in kinds and "box.stopped" in kinds
    with SignerClient(SignerPaths.from_env().socket) as signer:
        with pytest.raises(SignerError) as closed:
            signer.call("hold", request_id=new_request_id(), run_id=box["info"]["run_id"])
    assert closed.value.code == "run_closed"


def test_up_starts_signer_daemon_and_a_demo_box_reuses_them_and_down_stops_them(tmp_path, monkeypatch):
    checkout = make_checkout(tmp_path)
    monkeypatch.chdir(checkout)
    first = tkbox_json("up", "--backend", "bwrap")
    assert first["signer"]["started"] and first["daemon"]["started"] and first["demo_box"] == "demo"
    assert first["host"].startswith("host: boxes run with bwrap ") and "cgroup v" in first["host"]
    plain = tkbox("up", "--no-console").stdout.splitlines()
    assert plain == [first["host"], "signer running, daemon running"]  # the host summary first, then what started
    again = tkbox_json("up")
    assert not again["signer"]["started"] and not again["daemon"]["started"] and again["demo_box"] is None
    boxes = tkbox_json("ls")
    assert [b["name"] for b in boxes] == ["demo"] and boxes[0]["workspace"] == str(checkout)
    stopped = tkbox_json("down")
    assert stopped["daemon"]["stopped"] and stopped["signer"]["stopped"]
    assert tkbox("ls", check=False).returncode == 2
    from tkbox_daemon.config import DaemonPaths

    paths = DaemonPaths.from_env()
    for directory in (paths.layers_root, paths.channels_root):
        shutil.rmtree(directory, ignore_errors=True)
