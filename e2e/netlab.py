"""The network lab for end-to-end tests of the egress door: a daemon-side network namespace joined by veth pairs
to one upstream namespace per label, each upstream serving HTTP, HTTPS (certificate from a test root), a TCP echo
and a PEP 503 package index; all made by the test and removed after it, even when it fails.

Topology, for upstream number ``i`` (1, 2, …) of a lab::

    daemon side  nl-up<i>  11.0.<i>.1/24  2a00:11:0:<i>::1/64   <-veth->   nl-down  11.0.<i>.2  2a00:11:0:<i>::2
                                                                             upstream "<label>", name <label>.netlab.test

The addresses are global unicast, so the proxy's special-range checks treat them as any public host, and they
exist only inside the lab's namespaces: nothing is added to the machine's own namespace (the veths are created
inside the lab), and no lab namespace has a default route, so nothing in the lab reaches any other address (a
connect fails at once with ENETUNREACH).  Names resolve nowhere: tests pin them (``curl --resolve``, the box's
``--resolve NAME=ADDR``).

Ports in every upstream: HTTP on ``HTTP_PORTS``, HTTPS on ``HTTPS_PORTS``, the echo on ``ECHO_PORT``.  The
servers are ready when ``netlab`` yields (each prints a line once it listens; no sleeping).
"""

from __future__ import annotations

import base64
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.daemon_process import DaemonProcess, daemon_process
from e2e.netlab_ca import LabRootCA, ServerCertificate
from e2e.netlab_wheel import build_probe_wheel
from e2e.netns import (
    NETNS_DIR,
    PREFIX,
    cleanup_stale,
    create_namespaces,
    delete_namespaces,
    ip,
    is_stale,
    netns_command,
    new_base_name,
    run_in,
)
from e2e.netns_links import links_up_watch

DOMAIN = "netlab.test"
HTTP_PORTS = (80, 8080)
HTTPS_PORTS = (443, 8443)
ECHO_PORT = 7007
MAX_UPSTREAMS = 200
READY_BOUND_S = 60  # how long an upstream may take to listen before the test fails (a bound, not a wait)
STOP_BOUND_S = 10
LINKS_UP_BOUND_S = 30
LINK_INDEX_BASE = 1000
UPSTREAM_SCRIPT = Path(__file__).with_name("netlab_upstream.py")
CA_VARIABLES = frozenset({"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"})
_LABEL = re.compile(r"[a-z][a-z0-9-]{0,15}")


@dataclass(frozen=True)
class Upstream:
    """One upstream namespace: its name, addresses, certificate and the log of what its servers received."""

    label: str
    name: str
    """The DNS name the certificate is for (``<label>.netlab.test``; ``*.<label>.netlab.test`` too)."""
    namespace: str
    ipv4: str
    ipv6: str
    daemon_side_ipv4: str
    """The daemon-side end of this upstream's link: what the upstream sees as the peer of the daemon's dials."""
    daemon_side_ipv6: str
    certificate: ServerCertificate
    log: Path

    @property
    def addresses(self) -> tuple[str, str]:
        return (self.ipv4, self.ipv6)

    def resolve(self, port: int, *, ipv6: bool = False, name: str | None = None) -> str:
        """A ``curl --resolve`` entry pinning ``name`` (this upstream's by default) to one of its addresses."""
        address = f"[{self.ipv6}]" if ipv6 else self.ipv4
        return f"{name or self.name}:{port}:{address}"

    def received(self) -> list[dict]:
        """Everything the servers logged so far, in order: ``connection``, ``tls``, ``tls-failed``, ``request``,
        ``echo``, ``bad-request``, ``connection-error`` events (see ``netlab_upstream``)."""
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def requests(self) -> list[dict]:
        return [entry for entry in self.received() if entry["event"] == "request"]


def client_environment() -> dict[str, str]:
    """This process's environment without the variables that replace a client's CA choice: with
    ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` set (as some machines do), pip's ``--cert`` is ignored
    (requests lets them override a session's ``verify``); ``SSL_CERT_FILE``/``SSL_CERT_DIR`` change what
    OpenSSL-based clients trust by default."""
    return {name: value for name, value in os.environ.items() if name not in CA_VARIABLES}


def request_body(record: dict) -> bytes:
    """The body bytes of a ``request`` record (logged or echoed back as JSON)."""
    return base64.b64decode(record["body_base64"])


def request_header(record: dict, name: str) -> list[str]:
    """The values of header ``name`` (any case) in a ``request`` record, in the order received."""
    return [value for header, value in record["headers"] if header.lower() == name.lower()]


@dataclass(frozen=True)
class NetLab:
    """A running lab: the daemon-side namespace, the upstreams by label, the test root and the probe wheel."""

    daemon_namespace: str
    upstreams: dict[str, Upstream]
    root_ca: Path
    """PEM of the test root that issued every upstream's certificate (for ``curl --cacert``, ``pip --cert``, a
    box's CA bundle)."""
    probe_wheel: Path
    directory: Path

    def __getitem__(self, label: str) -> Upstream:
        return self.upstreams[label]

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.daemon_namespace, *(upstream.namespace for upstream in self.upstreams.values()))

    def run(self, *argv: str, input: str | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the daemon-side namespace to completion (text output captured), by default in
        ``client_environment()``."""
        return run_in(self.daemon_namespace, *argv, input=input, timeout=timeout,
                      env=client_environment() if env is None else env)

    def daemon(self, *args: str, **kwargs: object) -> AbstractContextManager[DaemonProcess]:
        """``daemon_process`` (same arguments) with the daemon inside the daemon-side namespace."""
        return daemon_process(*args, netns=self.daemon_namespace, **kwargs)  # type: ignore[arg-type]


@contextmanager
def netlab(*labels: str, directory: Path | None = None) -> Iterator[NetLab]:
    """A lab with one upstream per label (default: ``web``), its files in ``directory`` (default: a temporary
    folder removed afterwards).  On exit, normal or not, the servers stop and the namespaces are deleted."""
    labels = labels or ("web",)
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise ValueError(f"upstream label {label!r}: use 1-16 of a-z, 0-9 and '-', starting with a letter")
    if len(set(labels)) != len(labels) or len(labels) > MAX_UPSTREAMS:
        raise ValueError(f"upstream labels must be distinct and at most {MAX_UPSTREAMS}: {labels!r}")
    cleanup_stale()
    _remove_stale_directories()
    with ExitStack() as stack:
        base = new_base_name()
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{base}-")))
        daemon_namespace = f"{base}-daemon"
        upstream_namespaces = [f"{base}-up-{label}" for label in labels]
        stack.callback(delete_namespaces, [daemon_namespace, *upstream_namespaces])
        create_namespaces([daemon_namespace, *upstream_namespaces])
        ca = LabRootCA(directory)
        packages = directory / "packages"
        packages.mkdir()
        probe_wheel = build_probe_wheel(packages)
        upstreams = {}
        for number, (label, namespace) in enumerate(zip(labels, upstream_namespaces, strict=True), start=1):
            name = f"{label}.{DOMAIN}"
            ipv4, ipv6 = f"11.0.{number}.2", f"2a00:11:0:{number:x}::2"
            upstreams[label] = Upstream(
                label=label, name=name, namespace=namespace, ipv4=ipv4, ipv6=ipv6,
                daemon_side_ipv4=f"11.0.{number}.1", daemon_side_ipv6=f"2a00:11:0:{number:x}::1",
                certificate=ca.issue(f"upstream-{label}", [name, f"*.{name}"], [ipv4, ipv6]),
                log=directory / f"upstream-{label}.log")
        _wire(daemon_namespace, list(upstreams.values()))
        servers = []
        for upstream in upstreams.values():
            servers.append(_start_servers(upstream, packages, directory))
            stack.callback(_stop_server, servers[-1])
        for server, upstream in zip(servers, upstreams.values(), strict=True):
            _wait_ready(server, upstream, directory)
        yield NetLab(daemon_namespace, upstreams, ca.pem_path, probe_wheel, directory)


def _remove_stale_directories() -> None:
    """Remove the temporary folders of labs whose process was killed (named after its ``new_base_name``)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        if folder.is_dir() and is_stale(folder.name):
            shutil.rmtree(folder, ignore_errors=True)


def _wire(daemon_namespace: str, upstreams: list[Upstream]) -> None:
    """Create each veth pair inside the lab (never in the machine's namespace), address both ends, bring them up
    and wait until the kernel reports every link usable.  Daemon-side links get interface indexes unlike their
    peers' (a veth whose index equals its peer's has its state changes handled up to 1 s late)."""
    daemon_side = ["link set lo up"]
    for number, upstream in enumerate(upstreams, start=1):
        device = f"nl-up{number}"
        daemon_side += [
            f"link add {device} index {LINK_INDEX_BASE + number} type veth peer name nl-down "
            f"netns {upstream.namespace}",
            f"addr add {upstream.daemon_side_ipv4}/24 dev {device}",
            f"addr add {upstream.daemon_side_ipv6}/64 dev {device} nodad",
            f"link set {device} up",
        ]
    with ExitStack() as watches:
        daemon_links = watches.enter_context(links_up_watch(NETNS_DIR / daemon_namespace))
        upstream_links = [watches.enter_context(links_up_watch(NETNS_DIR / upstream.namespace))
                          for upstream in upstreams]
        ip(namespace=daemon_namespace, batch=daemon_side)
        for upstream in upstreams:
            ip(namespace=upstream.namespace, batch=[
                "link set lo up",
                f"addr add {upstream.ipv4}/24 dev nl-down",
                f"addr add {upstream.ipv6}/64 dev nl-down nodad",
                "link set nl-down up",
            ])
        daemon_links.wait_up([f"nl-up{number}" for number in range(1, len(upstreams) + 1)], LINKS_UP_BOUND_S)
        for watch in upstream_links:
            watch.wait_up(["nl-down"], LINKS_UP_BOUND_S)


def _start_servers(upstream: Upstream, packages: Path, directory: Path) -> subprocess.Popen[bytes]:
    config = directory / f"upstream-{upstream.label}.json"
    config.write_text(json.dumps({
        "addresses": list(upstream.addresses), "http_ports": list(HTTP_PORTS), "https_ports": list(HTTPS_PORTS),
        "echo_port": ECHO_PORT, "certificate": str(upstream.certificate.certificate),
        "key": str(upstream.certificate.key), "packages": str(packages), "log": str(upstream.log),
    }))
    upstream.log.touch()
    with open(directory / f"upstream-{upstream.label}.stderr", "wb") as stderr:
        # stdin stays open for the servers' life: they exit when it closes (this process ended or stopped them)
        return subprocess.Popen(netns_command(upstream.namespace, [sys.executable, "-I", str(UPSTREAM_SCRIPT),
                                                                    str(config)]),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)


def _wait_ready(server: subprocess.Popen[bytes], upstream: Upstream, directory: Path) -> None:
    assert server.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(server.stdout, selectors.EVENT_READ)
        line = server.stdout.readline() if selector.select(READY_BOUND_S) else b""
    if not line.startswith(b'{"ready"'):
        server.kill()
        server.wait()
        stderr = (directory / f"upstream-{upstream.label}.stderr").read_text(errors="replace")
        raise RuntimeError(f"the servers of upstream {upstream.label!r} did not get ready within "
                           f"{READY_BOUND_S} s (exit {server.poll()}):\n{stderr}")


def _stop_server(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None and server.stdout is not None
    server.stdin.close()
    try:
        server.wait(STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    server.stdout.close()
