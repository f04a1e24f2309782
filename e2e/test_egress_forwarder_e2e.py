"""The path out of a real box: a command connects to 127.0.0.1:3128, the guest's forwarder relays it over the box's
egress.sock to the daemon, whose default handler answers 403 naming the door (it dials nothing, so nothing leaves
the host); every exec has the proxy environment, and a per-exec proxy variable is refused."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from e2e.daemon_process import daemon_process, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon.rules import PROXY_ENV

pytestmark = pytest.mark.e2e

CONNECT_THROUGH_THE_FORWARDER = """
import socket
with socket.create_connection(("127.0.0.1", 3128), timeout=30) as s:
    s.sendall(b"CONNECT example.invalid:443 HTTP/1.1\\r\\nHost: example.invalid:443\\r\\n\\r\\n")
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
print(answer.decode("utf-8", "replace"))
"""


@pytest.fixture(params=["bwrap", "ns"])
def box(request, tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend=request.param):
        checkout = make_checkout(tmp_path)
        info = tkbox_json("run", "--name", "egress", "--workspace", str(checkout))
        assert info["state"] == "running"
        yield info
    tkbox("signer", "down", check=False)


def run(*argv: str, env: tuple[str, ...] = ()) -> subprocess.CompletedProcess[bytes]:
    options = [option for assignment in env for option in ("-e", assignment)]
    return subprocess.run([TKBOX, "exec", *options, "egress", "--", *argv], input=b"", capture_output=True,
                          timeout=120)


def test_a_connect_from_inside_the_box_reaches_the_daemon_and_gets_the_doors_403(box):
    result = run("/usr/bin/python3", "-I", "-S", "-c", CONNECT_THROUGH_THE_FORWARDER)
    assert result.returncode == 0, result.stderr
    answer = result.stdout.decode()
    assert answer.startswith("HTTP/1.1 403 Forbidden\r\n")
    # the proxy refuses the special-use name before anything is decided or dialled
    assert "tkbox egress door refused this connection of box egress" in answer and "rule: host-special-use" in answer


def test_every_exec_has_the_proxy_environment(box):
    result = run("env")
    assert result.returncode == 0, result.stderr
    shown = dict(line.split("=", 1) for line in result.stdout.decode().splitlines() if "=" in line)
    assert {name: shown.get(name) for name in PROXY_ENV} == PROXY_ENV


def test_a_per_exec_proxy_variable_is_refused_and_nothing_runs(box):
    result = run("sh", "-c", "echo ran", env=("HTTPS_PROXY=http://elsewhere:8080",))
    assert result.returncode == 126 and b"ran" not in result.stdout
    assert b"HTTPS_PROXY" in result.stderr and b"http://127.0.0.1:3128" in result.stderr


def test_the_job_cannot_open_the_egress_socket_itself(box):
    probe = ("import socket\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect('/run/tkbox/egress.sock')\nexcept OSError as e:\n    print('refused', e.errno)\n"
             "else:\n    print('connected')\n")
    result = run("/usr/bin/python3", "-I", "-S", "-c", probe)
    assert result.stdout.startswith(b"refused"), result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("curl", path="/usr/bin") is None, reason="curl is not installed")
def test_curl_uses_the_proxy_from_its_environment_and_sees_the_refusal(box):
    result = run("/usr/bin/curl", "-sS", "--max-time", "60", "https://example.invalid/")
    assert result.returncode != 0
    assert b"403" in result.stderr and b"CONNECT" in result.stderr
