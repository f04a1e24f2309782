"""The network door end to end: a real signer, the real daemon inside a test network namespace (``e2e/netlab.py``),
a real bubblewrap box whose only way out is its egress proxy, and real upstreams (HTTP, HTTPS with a test root,
a TCP echo) in namespaces the test makes, at addresses that exist only there; names pinned with ``--resolve``.

What the box's own programs (curl, Python) get: an allowlisted host works; an off-list host waits for a person
and works once approved, is refused once rejected; a metadata address and a private one are refused before any
decision; a ClientHello naming another server is cut off; a raw tunnel works only to an entry naming its port;
an allowlist change takes effect on the next connection. Every decision is a ``WebFetch`` in the box's run.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from e2e.daemon_process import make_checkout
from e2e.netlab import ECHO_PORT, netlab
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.bundle_records import record_events

pytestmark = pytest.mark.e2e
WAIT = 60
HELD = re.compile(r"approve with: tkbox approve (apr-[0-9a-f]{16})")


@pytest.fixture(scope="module")
def lab():
    with netlab("web", "other") as running:
        yield running


@pytest.fixture
def box(lab, tmp_path):
    checkout = make_checkout(tmp_path)
    (checkout / "lab-ca.crt").write_bytes(Path(lab.root_ca).read_bytes())  # not *.pem: never copied into a box
    web, other = lab["web"], lab["other"]
    tkbox("signer", "up")
    try:
        with lab.daemon(backend="bwrap"):
            tkbox_json("run", "--name", "net", "--workspace", str(checkout),
                       "--allow", web.name, "--allow", f"{web.name}:{ECHO_PORT}",
                       "--resolve", f"{web.name}={web.ipv4}", "--resolve", f"{other.name}={other.ipv4}")
            yield web, other
    finally:
        tkbox("signer", "down", check=False)


def in_box(*argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([TKBOX, "exec", "net", "--", *argv], capture_output=True, text=True, timeout=WAIT * 2)
    if check and result.returncode != 0:
        raise AssertionError(f"{argv} exited {result.returncode}: {result.stdout}\n{result.stderr}")
    return result


def curl(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return in_box("curl", "-sS", "--max-time", "30", "--cacert", "/workspace/lab-ca.crt", *extra, url)


def test_an_allowlisted_host_works_over_https_and_plain_http_and_each_connection_is_decided(box):
    web, _ = box
    https = curl(f"https://{web.name}/hello?x=1")
    assert https.returncode == 0, https.stderr + tkbox("events", "net").stdout[-3000:]
    plain = in_box("python3", "-c", f"import urllib.request; print(urllib.request.urlopen("
                                    f"'http://{web.name}/path?q=2', timeout=30).status)", check=True)
    assert plain.stdout.strip() == "200"
    seen = [entry["target"] for entry in web.requests()]
    assert "/hello?x=1" in seen and "/path?q=2" in seen
    events = [json.loads(line) for line in tkbox("events", "net", "--json").stdout.splitlines()]
    allowed = [event["data"]["url"] for event in events if event["kind"] == "egress.allowed"]
    assert f"https://{web.name}:443" in allowed and f"http://{web.name}:80/path?q=2" in allowed
    closed = [event["data"] for event in events if event["kind"] == "egress.closed"]
    assert all(entry["down"] > 0 for entry in closed) and len(closed) >= 2


def test_metadata_and_private_addresses_are_refused_before_any_decision(box):
    # --noproxy "": even loopback goes to the proxy (NO_PROXY keeps it in the box, where nothing listens)
    for url in ("http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::ffff:127.0.0.1]/",
                "http://0x7f000001/"):
        result = in_box("curl", "-sS", "--noproxy", "", "--max-time", "30", "-w", "%{http_code}", url)
        assert result.stdout.endswith("403"), (url, result.stdout, result.stderr)
        assert "tkbox egress door refused" in result.stdout
    events = [json.loads(line) for line in tkbox("events", "net", "--json").stdout.splitlines()]
    assert not [event for event in events if event["kind"] == "egress.allowed"]


def test_an_off_list_host_waits_for_a_person_approved_it_works_rejected_it_does_not(box):
    _, other = box
    process = subprocess.Popen([TKBOX, "approvals", "--follow", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    try:
        fetch = subprocess.Popen([TKBOX, "exec", "net", "--", "curl", "-sS", "--max-time", "60", "--cacert",
                                  "/workspace/lab-ca.crt", f"https://{other.name}/approved"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pending = json.loads(process.stdout.readline())["approval"]
        assert pending["kind"] == "host" and pending["asked"]["host"] == other.name
        assert "TK-A008" in pending["rule_ids"]
        tkbox("approve", pending["id"])
        out, err = fetch.communicate(timeout=WAIT)
        assert fetch.returncode == 0, err
        refused = subprocess.Popen([TKBOX, "exec", "net", "--", "curl", "-sS", "--max-time", "60", "-w", "%{http_code}", f"http://{other.name}/rejected"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while True:  # the follower's next lines: the first approval's answer, then the second ask
            entry = json.loads(process.stdout.readline())
            if entry["approval"]["state"] == "pending":
                break
        tkbox("reject", entry["approval"]["id"], "--reason", "not this host")
        out, _ = refused.communicate(timeout=WAIT)
        assert out.endswith("403") and "not this host" in out
    finally:
        process.kill()
        process.wait()
    assert "/approved" in [entry["target"] for entry in other.requests()]
    assert "/rejected" not in [entry["target"] for entry in other.requests()]


def test_a_hello_naming_another_server_is_cut_off_and_a_raw_tunnel_needs_its_port(box):
    web, _ = box
    script = (
        "import socket, ssl, sys\n"
        "s = socket.create_connection(('127.0.0.1', 3128), timeout=30)\n"
        f"s.sendall(b'CONNECT {web.name}:443 HTTP/1.1\\r\\nhost: {web.name}:443\\r\\n\\r\\n')\n"
        "head = b''\n"
        "while not head.endswith(b'\\r\\n\\r\\n'):\n"
        "    head += s.recv(1)\n"
        "ctx = ssl.create_default_context(cafile='/workspace/lab-ca.crt')\n"
        "ctx.check_hostname = False\n"
        "try:\n"
        "    ctx.wrap_socket(s, server_hostname='evil.example').sendall(b'x')\n"
        "    print('handshake done')\n"
        "except (ssl.SSLError, OSError) as exc:\n"
        "    print('cut off', type(exc).__name__)\n")
    assert in_box("python3", "-c", script).stdout.startswith("cut off")
    ech = (  # a ClientHello naming the CONNECT host and carrying an encrypted ClientHello (ECH) extension
        "import os, socket, struct\n"
        f"name = b'{web.name}'\n"
        "def ext(kind, data): return struct.pack('!HH', kind, len(data)) + data\n"
        "sni = ext(0, struct.pack('!HBH', len(name) + 3, 0, len(name)) + name)\n"
        "extensions = sni + ext(0xfe0d, b'\\x00' * 8)\n"
        "body = b'\\x03\\x03' + os.urandom(32) + b'\\x00' + b'\\x00\\x02\\x13\\x01' + b'\\x01\\x00' "
        "+ struct.pack('!H', len(extensions)) + extensions\n"
        "hello = b'\\x01' + len(body).to_bytes(3, 'big') + body\n"
        "record = b'\\x16\\x03\\x01' + struct.pack('!H', len(hello)) + hello\n"
        "s = socket.create_connection(('127.0.0.1', 3128), timeout=30)\n"
        f"s.sendall(b'CONNECT {web.name}:443 HTTP/1.1\\r\\nhost: {web.name}:443\\r\\n\\r\\n')\n"
        "head = b''\n"
        "while not head.endswith(b'\\r\\n\\r\\n'):\n"
        "    head += s.recv(1)\n"
        "s.sendall(record)\n"
        "print('closed' if s.recv(100) == b'' else 'answered')\n")
    assert in_box("python3", "-c", ech, check=True).stdout.strip() == "closed"
    events = [json.loads(line) for line in tkbox("events", "net", "--json").stdout.splitlines()]
    refused = [event["data"]["rule"] for event in events if event["kind"] == "egress.refused"]
    assert "egress-sni-mismatch" in refused and "egress-ech" in refused
    echo = ("import socket\n"
            "s = socket.create_connection(('127.0.0.1', 3128), timeout=30)\n"
            f"s.sendall(b'CONNECT {web.name}:{ECHO_PORT} HTTP/1.1\\r\\nhost: {web.name}:{ECHO_PORT}\\r\\n\\r\\n')\n"
            "head = b''\n"
            "while not head.endswith(b'\\r\\n\\r\\n'):\n"
            "    head += s.recv(1)\n"
            "s.sendall(b'ping')\n"
            "s.shutdown(socket.SHUT_WR)\n"
            "print(head.split(b'\\r\\n')[0].decode(), s.recv(100).decode())\n")
    assert in_box("python3", "-c", echo, check=True).stdout.strip() == "HTTP/1.1 200 Connection established ping"


def test_blocking_a_host_takes_effect_on_the_next_connection_and_the_run_holds_the_decisions(box, tmp_path):
    web, _ = box
    assert curl(f"https://{web.name}/before").returncode == 0
    tkbox("block", "net", web.name)
    # Off the list now: the next connection is held for a person (it would wait the approval's 2 minutes), not let
    # through; curl gives up after 5 s and the hold is in the inbox.
    in_box("curl", "-sS", "--max-time", "5", f"http://{web.name}/after")
    assert "/after" not in [entry["target"] for entry in web.requests()]
    held = [approval for approval in tkbox_json("approvals", "--all") if approval["kind"] == "host"]
    assert held and all(web.name in json.dumps(approval["asked"]) for approval in held)
    tkbox("stop", "net")
    bundle = tmp_path / "net.tkb"
    tkbox("export", "net", "-o", str(bundle))
    assert "Integrity: VERIFIED" in tkbox("verify", str(bundle), "--trust", str(tmp_path / "net.trust.json")).stdout
    records = record_events(bundle)
    fetches = [r for r in records if r["type"] == "policy.decision" and r["data"]["tool"] == "WebFetch"]
    assert fetches and all(r["data"]["tool_class"] == "http" for r in fetches)


def test_pip_installs_from_an_index_served_in_a_test_namespace_through_an_allow_entry(box):
    web, _ = box
    result = in_box("python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
                    "--index-url", f"https://{web.name}/simple", "--cert", "/workspace/lab-ca.crt",
                    "--target", "/tmp/probe", "tkbox-netlab-probe")
    assert result.returncode == 0, result.stdout + result.stderr
    listed = in_box("ls", "/tmp/probe", check=True).stdout
    assert "tkbox_netlab_probe" in listed or "tkbox-netlab-probe" in listed.replace("_", "-")


def test_an_off_list_host_nobody_answers_expires_while_the_client_waits(lab, tmp_path):
    checkout = make_checkout(tmp_path)
    other = lab["other"]
    tkbox("signer", "up")
    try:
        with lab.daemon("--approval-wait", "2", backend="bwrap"):
            tkbox_json("run", "--name", "net", "--workspace", str(checkout),
                       "--resolve", f"{other.name}={other.ipv4}")
            result = in_box("curl", "-sS", "--max-time", "60", "-w", "%{http_code}", f"http://{other.name}/late")
            assert result.stdout.endswith("403") and "egress-not-approved" in result.stdout
            approvals = tkbox_json("approvals", "--all")
            assert [approval["state"] for approval in approvals] == ["expired"]
    finally:
        tkbox("signer", "down", check=False)
    assert "/late" not in [entry["target"] for entry in other.requests()]
