"""The commands an agent calls in a loop import only what they need: each runs in a fresh interpreter against a small
canned daemon, and what it imported is checked (no aiohttp, Textual, cryptography, policy or evidence code; and for
every command, ``exec`` too, not even asyncio: they run without an event loop, see ``tkbox_tui.cli.loopless`` and
``exec_driver``; nor ``dataclasses``, which the wire schema's records do without)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

NEVER = ("aiohttp", "textual", "rich", "cryptography", "nacl", "yaml", "watchfiles", "re2",
         "tkbox_daemon.policy", "tkbox_daemon.evidence", "tkbox_daemon.signer", "tkbox_daemon.boxes",
         "tkbox_tui.console",
         "dataclasses", "h11", "wsproto")  # ~11 ms (inspect, ast, dis, tokenize), and the libraries that import it
NO_LOOP = ("asyncio", "ssl", "concurrent.futures")

# What the canned daemon answers, by request line; anything else is a 404 in the daemon's error shape.
REPLIES: dict[bytes, bytes] = {
    b"GET /v1/boxes HTTP/1.1": json.dumps({"boxes": []}).encode(),
    b"GET /v1/events?after=3&follow=0 HTTP/1.1": json.dumps({"events": [], "last_seq": 3}).encode(),
    b"GET /v1/approvals?state=pending HTTP/1.1": json.dumps({"approvals": []}).encode(),
}
NOT_FOUND = json.dumps({"error": {"code": "not_found", "message": "not found", "hint": None}}).encode()

COMMANDS = [
    (["ls", "--json"], 0, NO_LOOP),
    (["ls"], 0, NO_LOOP),
    (["events", "--after", "3"], 0, NO_LOOP),
    (["approvals", "--json"], 0, NO_LOOP),
    (["approve", "apr-1", "--json"], 2, NO_LOOP),
    (["reject", "apr-1"], 2, NO_LOOP),
    (["--version"], 0, NO_LOOP),
    (["exec", "b1", "--", "true"], 2, NO_LOOP),  # the canned daemon knows no box: refused after the WebSocket's 404
]

PROBE = """
import json, sys
from tkbox_tui.cli import main
status = main.main(sys.argv[1:])
sys.stdout.flush()
print("\\n" + json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _serve(listener: socket.socket) -> None:
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            head = b""
            while b"\r\n\r\n" not in head:
                data = connection.recv(65536)
                if not data:
                    break
                head += data
            line = head.split(b"\r\n", 1)[0]
            body = REPLIES.get(line)
            status = b"200 OK" if body is not None else b"404 Not Found"
            body = body if body is not None else NOT_FOUND
            connection.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                               + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


@pytest.fixture(scope="module")
def canned_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    runtime = tmp_path_factory.mktemp("daemon")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(runtime / "api.sock"))
    listener.listen(16)
    server = threading.Thread(target=_serve, args=(listener,), daemon=True)
    server.start()
    yield runtime
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()


@pytest.mark.parametrize(("argv", "status", "also_never"), COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_a_loop_command_imports_only_what_it_needs(canned_daemon, argv, status, also_never):
    ran = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "TKBOX_DAEMON_RUNTIME_DIR": str(canned_daemon)})
    result = json.loads(ran.stdout.decode().rsplit("\n", 2)[-2])
    assert result["status"] == status, ran.stderr.decode()
    imported = set(result["modules"])
    pulled = sorted(name for name in imported for top in NEVER + also_never
                    if name == top or name.startswith(top + "."))
    assert pulled == [], f"tkbox {' '.join(argv)} imported {pulled}"
    assert "tkbox_tui.client" in imported or argv == ["--version"]  # it did reach the client: the check means something


@pytest.mark.parametrize(("argv", "status"), [(["ls", "--json"], 0), (["approve", "apr-1", "--json"], 2),
                                              (["reject", "apr-1"], 2), (["--version"], 0)])
def test_the_console_script_ends_a_loop_command_with_all_its_output_and_its_status(canned_daemon, argv, status):
    """The console script skips the interpreter's teardown for these commands (``main._end_loop_command``): what
    they print and their status are what ``main`` gives in process."""
    env = {"PATH": "/usr/bin:/bin", "TKBOX_DAEMON_RUNTIME_DIR": str(canned_daemon)}
    script = subprocess.run([str(Path(sys.executable).parent / "tkbox"), *argv], capture_output=True, timeout=120,
                            env=env)
    in_process = subprocess.run([sys.executable, "-c", "import sys; from tkbox_tui.cli import main; "
                                 "sys.exit(main.main(sys.argv[1:]))", *argv], capture_output=True, timeout=120, env=env)
    assert (script.returncode, script.stdout, script.stderr) == (status, in_process.stdout, in_process.stderr)
    assert script.stdout or script.stderr
