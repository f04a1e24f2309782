"""Boot configuration, the command line, and the agent's small helpers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tkbox_guest import agent, protocol
from tkbox_guest.boot import MAX_BOOT_BYTES, BootConfig, BootError, JobUser, read_boot_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"box_id": "b", "env": {"PATH": "/usr/bin"}, "workspace": "/workspace", "agent_socket": "/run/a.sock",
          "limits": {"exec_timeout_ms": 5000, "max_execs": 8}, "clock": 123}


@pytest.fixture
def boot_socket():
    """A boot listener that sends whatever the test puts in ``payload[0]``, then closes."""
    directory = Path(tempfile.mkdtemp(prefix="tkg-boot-", dir="/tmp"))
    path = directory / "boot.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    payload: list[bytes] = [b""]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            try:
                conn.sendall(payload[0])
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield str(path), payload
    server.close()
    thread.join(timeout=10)
    path.unlink(missing_ok=True)
    directory.rmdir()


def test_a_valid_config_is_read(boot_socket):
    path, payload = boot_socket
    payload[0] = json.dumps(CONFIG).encode()
    config = read_boot_config(path)
    assert config == BootConfig(box_id="b", env={"PATH": "/usr/bin"}, workspace="/workspace",
                                agent_socket="/run/a.sock", exec_timeout_ms=5000, max_execs=8, clock_ms=123,
                                base_dir="/run/tkbox/base", upper_dir="/run/tkbox/upper")


def test_the_job_user_is_read(boot_socket):
    path, payload = boot_socket
    payload[0] = json.dumps({**CONFIG, "job": {"uid": 1000, "gid": 1000, "home": "/home/box"}}).encode()
    assert read_boot_config(path).job == JobUser(uid=1000, gid=1000, home="/home/box")


@pytest.mark.parametrize(("payload", "message"), [
    (b"", "invalid boot config"),
    (json.dumps({**CONFIG, "job": {"uid": 0, "gid": 1000, "home": "/h"}}).encode(), "uid"),  # never as root
    (json.dumps({**CONFIG, "job": {"uid": 1000, "gid": 0, "home": "/h"}}).encode(), "gid"),
    (json.dumps({**CONFIG, "job": {"uid": 1000, "gid": 1000, "home": "h"}}).encode(), "absolute"),
    (json.dumps({**CONFIG, "job": {"uid": 1000, "gid": 1000}}).encode(), "missing"),
    (json.dumps({**CONFIG, "job": {"uid": 1000, "gid": 1000, "home": "/h", "caps": 1}}).encode(), "unknown"),
    (json.dumps({**CONFIG, "job": [1000]}).encode(), "job must be an object"),
    (b'{"box_id":"b"}', "missing"),
    (json.dumps({**CONFIG, "extra": 1}).encode(), "unknown keys"),
    (b" " * (MAX_BOOT_BYTES + 1), "exceeds"),
])
def test_bad_configs_are_refused(boot_socket, payload, message):
    path, holder = boot_socket
    holder[0] = payload
    with pytest.raises(BootError, match=message):
        read_boot_config(path)


def test_a_missing_boot_socket_is_an_error(tmp_path):
    with pytest.raises(BootError, match="cannot read the boot socket"):
        read_boot_config(str(tmp_path / "none.sock"))


def _guest(*args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    entry = ["-m", "tkbox_guest"] if module else ["-I", "-S", str(ROOT / "guest")]
    return subprocess.run([sys.executable, *entry, *args], capture_output=True, text=True, timeout=60, cwd="/")


def test_the_box_entry_runs_the_folder_under_isolated_mode():
    result = _guest("--help")
    assert result.returncode == 0 and "--agent-socket" in result.stdout


@pytest.mark.parametrize("module", [False, True])
def test_no_boot_config_means_exit_status_1(tmp_path, module):
    result = _guest("--boot-socket", str(tmp_path / "missing.sock"), module=module)
    assert result.returncode == 1 and "tkbox-guest: cannot read the boot socket" in result.stderr


def test_the_diff_file_list_stays_within_its_budget():
    entries = [{"path": f"p{n}", "change": "added", "binary": False, "old_mode": None, "new_mode": "100644"}
               for n in range(100)]
    files, truncated = agent.bounded_file_list(entries, budget=1000)
    assert truncated and 0 < len(files) < 100
    assert sum(len(protocol.dumps(f)) + 1 for f in files) <= 1000
    assert agent.bounded_file_list(entries[:3]) == (entries[:3], False)


def test_blocks_regroup_pieces_without_loss():
    pieces = [b"a" * 5, b"", b"b" * 13, b"c"]
    blocks = list(agent._blocks(pieces, 4))
    assert b"".join(blocks) == b"".join(pieces) and all(len(b) == 4 for b in blocks[:-1])


def _holding_server(tmp_path: Path, send: bytes, *, hold_before: threading.Event, hold_after: threading.Event):
    """A boot listener that waits for ``hold_before`` before sending ``send``, then for ``hold_after`` before it
    closes (the way the host holds a box started ahead, and a host that stalls mid-configuration)."""
    path = tmp_path / "boot.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            hold_before.wait(30)
            conn.sendall(send)
            hold_after.wait(30)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return str(path), thread


def test_the_guest_waits_for_its_first_byte_as_long_as_the_host_holds_it(tmp_path):
    """A box started ahead waits in its boot until it is taken: the read's deadline starts at the first byte."""
    sent, closed = threading.Event(), threading.Event()
    path, thread = _holding_server(tmp_path, json.dumps(CONFIG).encode(), hold_before=sent, hold_after=closed)
    timer = threading.Timer(0.3, sent.set)  # held ten times longer than the read's own deadline
    timer.start()
    closed.set()
    assert read_boot_config(path, timeout_s=0.03).box_id == "b"
    thread.join(10)


def test_a_configuration_that_stalls_after_its_first_byte_is_refused_at_the_deadline(tmp_path):
    sent, closed = threading.Event(), threading.Event()
    sent.set()
    path, thread = _holding_server(tmp_path, b"{", hold_before=sent, hold_after=closed)
    with pytest.raises(BootError, match="not received within"):
        read_boot_config(path, timeout_s=0.05)
    closed.set()
    thread.join(10)
