"""The two ends of an egress connection for ``bench/egress.py``, each in its own process, on loopback only.

    python bench/egress_peers.py upstream CERT KEY   # prints {"raw": port, "tls": port}; serves until stdin ends
    python bench/egress_peers.py client              # reads one JSON job a line on stdin, answers one a line

The upstream serves one exchange per connection, plain or in TLS: ``U`` + 8-byte length (the client sends that
many bytes; the server answers the 8-byte count it read), ``D`` + 8-byte length (the server sends that many bytes
and closes). A connection that sends nothing is closed. The client reaches it directly (``{"tcp": port}``, the
baseline) or through the proxy (``{"unix": path, "connect": "host:port"}``: a CONNECT on the egress socket, as the
guest's forwarder opens it), and times only what each job names: with blocking sockets, except the job of many
connections at once, which runs them on its own event loop. Nothing here runs in the proxy's process, so that
process does nothing but the proxy's work.
"""

from __future__ import annotations

import asyncio
import json
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time
from typing import Any

LOOPBACK = "127.0.0.1"
CHUNK = 256 * 1024
HEAD_LIMIT = 16 * 1024
TIMEOUT = 120.0


# ---- the upstream -------------------------------------------------------------------------------------------------

def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the peer closed mid-message")
        data += chunk
    return data


def _sink(sock: socket.socket, count: int) -> int:
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    seen = 0
    while seen < count:
        got = sock.recv_into(view, min(CHUNK, count - seen))
        if not got:
            break
        seen += got
    return seen


def _source(sock: socket.socket, count: int, payload: bytes) -> None:
    left = count
    while left:
        piece = payload if left >= len(payload) else payload[:left]
        sock.sendall(piece)
        left -= len(piece)


def _serve_one(sock: socket.socket, payload: bytes) -> None:
    command = sock.recv(1)
    if not command:
        return
    (count,) = struct.unpack("!Q", _recv_exactly(sock, 8))
    if command == b"U":
        sock.sendall(struct.pack("!Q", _sink(sock, count)))
    elif command == b"D":
        _source(sock, count, payload)


def upstream(cert: str, key: str) -> int:
    payload = bytes(range(256)) * (CHUNK // 256)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)

    class Raw(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                _serve_one(self.request, payload)
            except (OSError, ConnectionError):
                pass

    class Tls(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                with tls.wrap_socket(self.request, server_side=True) as wrapped:
                    _serve_one(wrapped, payload)
            except (OSError, ConnectionError):
                pass

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 1024

    servers = [Server((LOOPBACK, 0), Raw), Server((LOOPBACK, 0), Tls)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"raw": servers[0].server_address[1], "tls": servers[1].server_address[1]}), flush=True)
    sys.stdin.read()  # the bench closes our stdin to stop us
    return 0


# ---- the client ---------------------------------------------------------------------------------------------------

def _read_head(sock: socket.socket) -> bytes:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)  # one at a time: nothing of the tunnel's own bytes is read with the head
        if not byte or len(head) > HEAD_LIMIT:
            raise ConnectionError(f"the proxy answered {head[:200]!r} and closed")
        head += byte
    return head


def _open(via: dict[str, Any], tls: bool, server_name: str) -> socket.socket:
    if "tcp" in via:
        sock = socket.create_connection((LOOPBACK, via["tcp"]), timeout=TIMEOUT)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT)
        sock.connect(via["unix"])
        sock.sendall(f"CONNECT {via['connect']} HTTP/1.1\r\nHost: {via['connect']}\r\n\r\n".encode())
        head = _read_head(sock)
        if not head.startswith(b"HTTP/1.1 200 "):
            sock.close()
            raise ConnectionError(f"the proxy refused the tunnel: {head[:300]!r}")
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # a throwaway certificate
        sock = context.wrap_socket(sock, server_hostname=server_name)
    return sock


def transfer(job: dict[str, Any]) -> dict[str, Any]:
    """One upload or download of ``bytes``; the time runs from the first byte of the exchange (tunnel and TLS
    already open) to the last."""
    count = job["bytes"]
    payload = bytes(range(256)) * (CHUNK // 256)
    with _open(job["via"], job.get("tls", False), job.get("server_name", "")) as sock:
        start = time.perf_counter()
        if job["job"] == "upload":
            sock.sendall(b"U" + struct.pack("!Q", count))
            _source(sock, count, payload)
            (seen,) = struct.unpack("!Q", _recv_exactly(sock, 8))
        else:
            sock.sendall(b"D" + struct.pack("!Q", count))
            seen = _sink(sock, count)
        seconds = time.perf_counter() - start
    if seen != count:
        raise ConnectionError(f"{seen} of {count} bytes arrived")
    return {"seconds": seconds}


def connects(job: dict[str, Any]) -> dict[str, Any]:
    """``count`` connections one after another (``pause`` seconds apart): the time from the CONNECT sent to the
    proxy's 200 read, each then closed after an empty upload went through the tunnel (so every one is relayed and
    completed)."""
    via = job["via"]
    times = []
    for _ in range(job["count"]):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT)
            sock.connect(via["unix"])
            start = time.perf_counter()
            sock.sendall(f"CONNECT {via['connect']} HTTP/1.1\r\nHost: {via['connect']}\r\n\r\n".encode())
            head = _read_head(sock)
            times.append(time.perf_counter() - start)
            if not head.startswith(b"HTTP/1.1 200 "):
                raise ConnectionError(f"the proxy refused the tunnel: {head[:300]!r}")
            sock.sendall(b"U" + struct.pack("!Q", 0))
            _recv_exactly(sock, 8)
        if job.get("pause"):
            time.sleep(job["pause"])
    return {"seconds": times}


def _one_more(path: str, request: bytes) -> tuple[bytes, str]:
    """A connection past the box's limit, as a blocking client makes it: what it read, and the error it met."""
    answer, error = b"", ""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(path)
        try:
            sock.sendall(request)
        except OSError as exc:  # the listener may have answered and closed before our request arrived
            error = type(exc).__name__
        try:
            while (chunk := sock.recv(HEAD_LIMIT)) and b"\r\n\r\n" not in answer + chunk:
                answer += chunk
            answer += chunk
        except OSError as exc:
            error = error or type(exc).__name__
    return answer, error


async def _concurrent(job: dict[str, Any]) -> dict[str, Any]:
    """``count`` connections open at once through the proxy, then one more (which the box's limit must refuse),
    then each uploads ``bytes`` and reads its answer. Failures are counted by kind, not raised."""
    via, count, size = job["via"], job["count"], job["bytes"]
    request = f"CONNECT {via['connect']} HTTP/1.1\r\nHost: {via['connect']}\r\n\r\n".encode()
    payload = bytes(range(256)) * (CHUNK // 256)
    all_settled = asyncio.Event()
    settled = 0

    async def opened() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        nonlocal settled
        try:
            reader, writer = await asyncio.open_unix_connection(via["unix"])
        except OSError:
            settled += 1
            raise
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200 "):
                raise ConnectionError(f"refused: {head[:60]!r}")
        except BaseException:
            writer.close()
            raise
        finally:
            settled += 1
        return reader, writer

    async def one() -> bool:
        try:
            reader, writer = await opened()
        finally:  # open, refused or failed: once every connection has settled, all that will be open are
            if settled == count:
                all_settled.set()
        try:
            await all_settled.wait()  # every connection is open before any ends
            writer.write(b"U" + struct.pack("!Q", size))
            left = size
            while left:
                piece = payload[:min(left, len(payload))]
                writer.write(piece)
                await writer.drain()
                left -= len(piece)
            return struct.unpack("!Q", await reader.readexactly(8))[0] == size
        finally:
            writer.close()

    start = time.perf_counter()
    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    await asyncio.wait_for(all_settled.wait(), TIMEOUT)
    established = time.perf_counter() - start
    extra, extra_error = await asyncio.to_thread(_one_more, via["unix"], request)  # while all are open
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), TIMEOUT)
    total = time.perf_counter() - start
    failures: dict[str, int] = {}
    for result in results:
        if result is not True:
            failures[repr(result)[:120]] = failures.get(repr(result)[:120], 0) + 1
    return {"ok": results.count(True), "failures": failures, "established": established,
            "seconds": total, "extra": extra[:400].decode("ascii", "backslashreplace"), "extra_error": extra_error}


def client() -> int:
    jobs = {"upload": transfer, "download": transfer, "connects": connects,
            "concurrent": lambda job: asyncio.run(_concurrent(job))}
    for line in sys.stdin:
        job = json.loads(line)
        try:
            answer = jobs[job["job"]](job)
        except (TimeoutError, OSError, ConnectionError, ssl.SSLError) as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["upstream"]:
        raise SystemExit(upstream(sys.argv[2], sys.argv[3]))
    if sys.argv[1:2] == ["client"]:
        raise SystemExit(client())
    raise SystemExit("usage: egress_peers.py upstream CERT KEY | client")
