"""The network lab itself (``e2e/netlab.py``): from its daemon-side namespace real clients (curl, pip, a socket)
reach the HTTP, HTTPS, echo and package-index servers of its upstream namespaces; the machine's own namespace
has none of its addresses; the daemon runs inside it; everything it made is gone afterwards.

No check here sends a packet to an address outside the lab, and nothing connects from the machine's own namespace
to a lab address (a machine with a default route would carry it to the real 11.0.0.0/8): that namespace is probed
only with ``bind``, which sends nothing.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from e2e.netlab import ECHO_PORT, HTTP_PORTS, HTTPS_PORTS, netlab, request_body, request_header
from e2e.netlab_ca import LabRootCA
from e2e.netlab_wheel import PROBE_MARKER, PROBE_MODULE, PROBE_PROJECT
from e2e.netns import NETNS_DIR, PREFIX, cleanup_stale, ip, lab_namespaces, new_base_name

pytestmark = pytest.mark.e2e


ECHO_CLIENT = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as connection:
    connection.sendall(sys.argv[3].encode())
    connection.shutdown(socket.SHUT_WR)
    received = b""
    while data := connection.recv(65536):
        received += data
print(received.decode())
"""

CONNECT_ERROR = """
import errno, socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
with socket.socket(family, socket.SOCK_STREAM) as probe:
    probe.settimeout(5)
    try:
        probe.connect((sys.argv[1], 80))
    except OSError as error:
        print(errno.errorcode.get(error.errno, error.errno))
    else:
        print("connected")
"""



class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to the daemon's API socket (a path: reachable from any network namespace)."""

    def __init__(self, path: str) -> None:
        super().__init__("tkbox", timeout=30)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


@pytest.fixture(scope="module")
def lab():
    with netlab("web", "other") as running:
        yield running


def curl(lab, *args: str) -> subprocess.CompletedProcess[str]:
    return lab.run("curl", "--silent", "--show-error", "--max-time", "30", *args)


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_http_reaches_the_upstream_which_sees_exactly_what_was_sent(lab, ipv6):
    web = lab["web"]
    before = len(web.requests())
    answer = curl(lab, "--resolve", web.resolve(80, ipv6=ipv6), "-H", "X-Probe: one", "--data-binary", "a=b&c",
                  "http://web.netlab.test/some/path?q=1&r=%2F")
    assert answer.returncode == 0, answer.stderr
    echoed = json.loads(answer.stdout)
    assert (echoed["method"], echoed["target"], echoed["server"]) == ("POST", "/some/path?q=1&r=%2F", "http")
    assert request_header(echoed, "host") == ["web.netlab.test"] and request_header(echoed, "x-probe") == ["one"]
    assert request_body(echoed) == b"a=b&c"
    assert echoed["peer"].split()[0] == (web.daemon_side_ipv6 if ipv6 else web.daemon_side_ipv4)
    assert web.requests()[before:] == [echoed]


def test_every_upstream_serves_on_its_own_addresses(lab):
    for upstream in lab.upstreams.values():
        for port in HTTP_PORTS:
            answer = curl(lab, "--resolve", upstream.resolve(port), f"http://{upstream.name}:{port}/")
            assert answer.returncode == 0, answer.stderr
            assert json.loads(answer.stdout)["target"] == "/"
    assert lab["web"].ipv4 != lab["other"].ipv4 and lab["web"].namespace != lab["other"].namespace


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_https_verifies_against_the_test_root_and_the_upstream_sees_the_server_name(lab, ipv6):
    web = lab["web"]
    for port in HTTPS_PORTS:
        answer = curl(lab, "--cacert", str(lab.root_ca), "--resolve", web.resolve(port, ipv6=ipv6),
                      f"https://web.netlab.test:{port}/secure?x=1")
        assert answer.returncode == 0, answer.stderr
        echoed = json.loads(answer.stdout)
        assert (echoed["server"], echoed["server_name"], echoed["target"]) == ("https", "web.netlab.test",
                                                                               "/secure?x=1")
    wildcard = curl(lab, "--cacert", str(lab.root_ca), "--resolve", web.resolve(443, name="api.web.netlab.test"),
                    "https://api.web.netlab.test/")
    assert wildcard.returncode == 0 and json.loads(wildcard.stdout)["server_name"] == "api.web.netlab.test"


def test_https_fails_against_any_other_root_and_for_a_name_the_certificate_lacks(lab, tmp_path):
    web = lab["web"]
    stranger = LabRootCA(tmp_path, "some other root")
    untrusted = curl(lab, "--cacert", str(stranger.pem_path), "--resolve", web.resolve(443),
                     "https://web.netlab.test/")
    assert untrusted.returncode == 60, untrusted.stderr  # CURLE_PEER_FAILED_VERIFICATION
    wrong_name = curl(lab, "--cacert", str(lab.root_ca), "--resolve", web.resolve(443, name="other.netlab.test"),
                      "https://other.netlab.test/")
    assert wrong_name.returncode == 60, wrong_name.stderr


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_the_echo_server_returns_every_byte_and_closes_after_the_client_does(lab, ipv6):
    web = lab["web"]
    message = "not TLS, not HTTP: raw bytes " * 1000
    answer = lab.run(sys.executable, "-I", "-c", ECHO_CLIENT, web.ipv6 if ipv6 else web.ipv4, str(ECHO_PORT),
                     message)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == message + "\n"


def test_the_index_lists_the_probe_wheel_with_its_hash_over_plain_http(lab):
    web = lab["web"]
    page = curl(lab, "--resolve", web.resolve(80), f"http://web.netlab.test/simple/{PROBE_PROJECT}/")
    digest = hashlib.sha256(lab.probe_wheel.read_bytes()).hexdigest()
    assert f'href="/packages/{lab.probe_wheel.name}#sha256={digest}"' in page.stdout
    wheel = lab.run("sh", "-c", f"curl --silent --resolve {web.resolve(80)} "
                                f"http://web.netlab.test/packages/{lab.probe_wheel.name} | sha256sum")
    assert wheel.stdout.split()[0] == digest


def test_pip_installs_the_probe_from_the_https_index_trusting_the_test_root(lab, tmp_path):
    web = lab["web"]
    target = tmp_path / "target"
    installed = lab.run(sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-cache-dir",
                        "--retries", "0", "--timeout", "30", "install", "--no-deps", "--target", str(target),
                        "--cert", str(lab.root_ca), "--index-url", f"https://{web.ipv4}/simple", PROBE_PROJECT)
    assert installed.returncode == 0, installed.stderr
    probe = subprocess.run([sys.executable, "-c", f"import {PROBE_MODULE}; print({PROBE_MODULE}.MARKER)"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)})
    assert probe.stdout == PROBE_MARKER + "\n", probe.stderr
    fetched = [entry["target"] for entry in web.requests() if entry["server"] == "https"]
    assert f"/simple/{PROBE_PROJECT}/" in fetched and f"/packages/{lab.probe_wheel.name}" in fetched


def test_the_lab_addresses_exist_only_inside_the_lab(lab):
    machine_devices = {link["ifname"] for link in json.loads(ip("-json", "link", "show"))}
    assert not {device for device in machine_devices if device.startswith("nl-")}
    for upstream in lab.upstreams.values():
        for address in upstream.addresses:
            with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
                with pytest.raises(OSError) as refused:
                    probe.bind((address, 0))  # sends nothing; fails where the address does not exist
            assert refused.value.errno == errno.EADDRNOTAVAIL
        inside = lab.run(sys.executable, "-I", "-c", CONNECT_ERROR, upstream.ipv4)
        assert inside.stdout == "connected\n"  # the same connect reaches it from the daemon side


def test_nothing_in_the_lab_reaches_an_address_outside_it(lab):
    for namespace in lab.namespaces:
        for family in ("-4", "-6"):
            assert json.loads(ip(family, "-json", "route", "show", "default", namespace=namespace)) == []
    for outside in ("11.0.0.1", "11.0.255.2", "2a00:11::1"):  # outside every lab link
        route = subprocess.run(["ip", "-n", lab.daemon_namespace, "route", "get", outside], capture_output=True,
                               text=True)
        assert route.returncode != 0 and "unreachable" in route.stderr  # no route: a connect sends nothing
        attempt = lab.run(sys.executable, "-I", "-c", CONNECT_ERROR, outside)
        assert attempt.stdout == "ENETUNREACH\n", attempt.stderr


def test_the_daemon_runs_in_the_daemon_side_namespace_and_answers_on_its_unix_socket(lab):
    with lab.daemon("--unrecorded") as daemon:
        daemon_namespace = os.stat(f"/proc/{daemon.process.pid}/ns/net").st_ino
        assert daemon_namespace == os.stat(NETNS_DIR / lab.daemon_namespace).st_ino
        assert daemon_namespace != os.stat("/proc/self/ns/net").st_ino
        api = UnixHTTPConnection(str(daemon.paths.api_socket))
        api.request("GET", "/v1/boxes")
        answer = api.getresponse()
        assert (answer.status, json.loads(answer.read())) == (200, {"boxes": []})


def test_everything_is_torn_down_after_a_failure_inside_the_block():
    killed_run = Path(tempfile.gettempdir()) / f"{PREFIX}{_finished_pid()}-0-abcd1234"
    killed_run.mkdir()
    with pytest.raises(RuntimeError, match="a failing test"), netlab("solo") as failing:
        assert not killed_run.exists()  # a killed run's folder goes when the next lab starts
        names = failing.namespaces
        server_pids = [int(pid) for pid in ip("netns", "pids", failing["solo"].namespace).split()]
        assert server_pids and set(names) <= set(lab_namespaces())
        raise RuntimeError("a failing test")
    listed = ip("netns", "list")
    assert not [name for name in names if name in listed]
    assert not failing.directory.exists()
    for pid in server_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_cleanup_stale_removes_only_dead_runs_namespaces_with_our_prefix():
    stale = f"{PREFIX}{_finished_pid()}-0-daemon"
    live = f"{new_base_name()}-daemon"
    foreign = f"tkbox-e2e-keep-{os.getpid()}"
    for name in (stale, live, foreign):
        ip("netns", "add", name)
    try:
        cleanup_stale()
        assert not (NETNS_DIR / stale).exists()
        assert (NETNS_DIR / live).exists() and (NETNS_DIR / foreign).exists()
    finally:
        for name in (stale, live, foreign):
            if (NETNS_DIR / name).exists():
                ip("netns", "delete", name)


def _finished_pid() -> int:
    """The pid of a process that has ended (as a killed test run's has)."""
    finished = subprocess.Popen(["true"])
    finished.wait()
    return finished.pid
