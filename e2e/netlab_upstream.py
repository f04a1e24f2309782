"""The upstream servers of the network lab, run as one process inside an upstream network namespace.

``python netlab_upstream.py CONFIG.json`` listens on each of the namespace's addresses with:

- plain HTTP and HTTPS (h11 parses the requests; TLS with the test root's certificate): ``/simple/…`` is a PEP 503
  package index of the wheels in the configured folder, ``/packages/FILE`` serves them, ``/bytes/N`` answers N
  bytes, and any other request is answered with JSON describing exactly what arrived (method, raw target, headers
  in order and case, body, TLS server name, peer);
- a TCP echo server that returns every byte and honours half-close (EOF in, then EOF out).

Every connection, TLS handshake and request is appended to a JSON-lines log (one ``os.write`` per line, written
before the answer is sent) so a test can check what the upstream received, or that it received nothing.  Once
every socket listens it prints one JSON line to stdout (its readiness signal); it exits when its stdin closes,
so a test process that dies takes its servers with it.  Standard library and h11 only: the script runs outside
the repository's import path.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path

import h11

MAX_HEAD = 64 * 1024
MAX_BODY = 1 << 20
MAX_BYTES_ANSWER = 64 << 20
IDLE_TIMEOUT_S = 120  # a connection left open by a test (or a proxy under test) ends after this
BYTES_CHUNK = 64 * 1024


class EventLog:
    """Appends one JSON object per line; a line is one ``write`` on an ``O_APPEND`` file, so readers never see
    half a line from concurrent connections."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._lock = threading.Lock()

    def write(self, **entry: object) -> None:
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


class PackageIndex:
    """A PEP 503 "simple" index over the wheels in one folder, rendered once at start."""

    def __init__(self, folder: str) -> None:
        self.files: dict[str, bytes] = {}
        links: dict[str, list[str]] = {}
        for wheel in sorted(Path(folder).glob("*.whl")):
            data = wheel.read_bytes()
            self.files[wheel.name] = data
            project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
            digest = hashlib.sha256(data).hexdigest()
            name = html.escape(wheel.name)
            links.setdefault(project, []).append(f'<a href="/packages/{name}#sha256={digest}">{name}</a>')
        self.root = _page("Simple index", [f'<a href="/simple/{p}/">{p}</a>' for p in sorted(links)])
        self.projects = {project: _page(f"Links for {project}", anchors) for project, anchors in links.items()}


def _page(title: str, anchors: list[str]) -> bytes:
    body = "<br>\n".join(anchors)
    return (f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'
            f"<title>{html.escape(title)}</title></head><body>\n{body}\n</body></html>\n").encode()


class Upstream:
    """The servers of one namespace, sharing its log, package index and TLS context."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.log = EventLog(config["log"])
        self.index = PackageIndex(config["packages"])
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(config["certificate"], config["key"])
        self.tls.sni_callback = self._note_server_name
        self._handshake = threading.local()

    def start(self) -> list[str]:
        """Bind and listen on every address and port, then accept on threads; returns what listens."""
        servers: list[tuple[int, str, Callable[[socket.socket, str], None]]] = []
        servers += [(port, "http", self.serve_http) for port in self.config["http_ports"]]
        servers += [(port, "https", self.serve_https) for port in self.config["https_ports"]]
        servers += [(self.config["echo_port"], "echo", self.serve_echo)]
        listening = []
        for address in self.config["addresses"]:
            for port, kind, serve in servers:
                listener = _listen(address, port)
                threading.Thread(target=self._accept_forever, args=(listener, kind, serve), daemon=True).start()
                listening.append(f"{kind} {address} {port}")
        return listening

    def _accept_forever(self, listener: socket.socket, kind: str,
                        serve: Callable[[socket.socket, str], None]) -> None:
        while True:
            connection, peer = listener.accept()
            peer_text = f"{peer[0]} {peer[1]}"
            self.log.write(event="connection", server=kind, port=listener.getsockname()[1], peer=peer_text)
            threading.Thread(target=self._serve_guarded, args=(serve, connection, peer_text), daemon=True).start()

    def _serve_guarded(self, serve: Callable[[socket.socket, str], None], connection: socket.socket,
                       peer: str) -> None:
        connection.settimeout(IDLE_TIMEOUT_S)
        try:
            serve(connection, peer)
        except (OSError, h11.ProtocolError) as error:
            self.log.write(event="connection-error", peer=peer, error=f"{type(error).__name__}: {error}")
        finally:
            connection.close()

    def serve_echo(self, connection: socket.socket, peer: str) -> None:
        total = 0
        while data := connection.recv(BYTES_CHUNK):
            connection.sendall(data)
            total += len(data)
        connection.shutdown(socket.SHUT_WR)
        self.log.write(event="echo", peer=peer, bytes=total)

    def serve_https(self, connection: socket.socket, peer: str) -> None:
        self._handshake.server_name = None
        tls = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError) as error:
            self.log.write(event="tls-failed", peer=peer, server_name=self._handshake.server_name,
                           error=f"{type(error).__name__}: {error}")
            return
        server_name = self._handshake.server_name
        self.log.write(event="tls", peer=peer, server_name=server_name, version=tls.version())
        try:
            self._serve_requests(tls, peer, "https", server_name)
        finally:
            tls.close()

    def serve_http(self, connection: socket.socket, peer: str) -> None:
        self._serve_requests(connection, peer, "http", None)

    def _note_server_name(self, _socket: object, server_name: str | None, _context: object) -> None:
        self._handshake.server_name = server_name

    def _serve_requests(self, connection: socket.socket, peer: str, scheme: str, server_name: str | None) -> None:
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while True:
            try:
                exchange = _read_request(http, connection)
            except (h11.RemoteProtocolError, BodyTooLarge) as error:
                self.log.write(event="bad-request", server=scheme, peer=peer, error=str(error))
                if http.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    _send(http, connection, 400, "text/plain", f"bad request: {error}\n".encode(), head=False)
                return
            if exchange is None:
                return
            request, body = exchange
            record = {
                "event": "request", "server": scheme, "server_name": server_name, "peer": peer,
                "method": request.method.decode("latin-1"), "target": request.target.decode("latin-1"),
                "http_version": request.http_version.decode("latin-1"),
                "headers": [[name.decode("latin-1"), value.decode("latin-1")]
                            for name, value in request.headers.raw_items()],
                "body_base64": base64.b64encode(body).decode(),
            }
            self.log.write(**record)
            status, content_type, payload = self._answer(record)
            _send(http, connection, status, content_type, payload, head=record["method"] == "HEAD")
            if h11.MUST_CLOSE in (http.our_state, http.their_state):
                return
            http.start_next_cycle()

    def _answer(self, record: dict) -> tuple[int, str, bytes]:
        path = record["target"].split("?", 1)[0]
        if path == "/simple/":
            return 200, "text/html", self.index.root
        if match := re.fullmatch(r"/simple/([a-z0-9-]+)/", path):
            page = self.index.projects.get(match.group(1))
            return (200, "text/html", page) if page else (404, "text/plain", b"no such project\n")
        if match := re.fullmatch(r"/packages/([A-Za-z0-9_.-]+\.whl)", path):
            data = self.index.files.get(match.group(1))
            return (200, "application/octet-stream", data) if data else (404, "text/plain", b"no such file\n")
        if match := re.fullmatch(r"/bytes/([0-9]{1,9})", path):
            count = int(match.group(1))
            if count > MAX_BYTES_ANSWER:
                return 400, "text/plain", f"at most {MAX_BYTES_ANSWER} bytes\n".encode()
            return 200, "application/octet-stream", b"x" * count
        return 200, "application/json", json.dumps(record, sort_keys=True).encode() + b"\n"


class BodyTooLarge(Exception):
    pass


def _read_request(http: h11.Connection, connection: socket.socket) -> tuple[h11.Request, bytes] | None:
    """The next request and its whole body, or None when the client closed between requests."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            if http.they_are_waiting_for_100_continue:
                connection.sendall(http.send(h11.InformationalResponse(status_code=100, headers=[])))
            http.receive_data(connection.recv(BYTES_CHUNK))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise BodyTooLarge(f"body over {MAX_BODY} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _send(http: h11.Connection, connection: socket.socket, status: int, content_type: str, payload: bytes,
          *, head: bool) -> None:
    headers = [("content-type", content_type), ("content-length", str(len(payload))), ("server", "tkbox-netlab")]
    connection.sendall(http.send(h11.Response(status_code=status, headers=headers,
                                              reason=HTTPStatus(status).phrase.encode())))
    if not head:
        view = memoryview(payload)
        for start in range(0, len(view), BYTES_CHUNK):
            connection.sendall(http.send(h11.Data(data=view[start:start + BYTES_CHUNK])))
    connection.sendall(http.send(h11.EndOfMessage()))


def _listen(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    listener.bind((address, port))
    listener.listen(256)
    return listener


def _exit_when_stdin_closes() -> None:
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    listening = Upstream(config).start()
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    sys.stdout.write(json.dumps({"ready": listening}) + "\n")
    sys.stdout.flush()
    threading.Event().wait()


if __name__ == "__main__":
    main()
