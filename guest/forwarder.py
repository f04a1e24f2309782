"""The egress forwarder: the box's one way to the network door.

Inside the box (a network namespace with only ``lo``) the guest listens on ``127.0.0.1:3128``, the address every
exec's ``HTTP_PROXY``/``HTTPS_PROXY`` names. Each accepted TCP connection gets its own new Unix connection to the
host's egress socket (``/run/tkbox/egress.sock``, which only the guest's uid may open), and the bytes are relayed
both ways, unread: the host's proxy does all the parsing and deciding, and believes nothing the guest says.

- Bounded: each direction holds at most ``CHUNK`` bytes at a time and reads again only once they are all written,
  so a side that does not read stops the other side's sender (its socket buffer fills) instead of filling memory
  (``lanes``: the same relay as the host's egress proxy).
- Half-close: when one side ends its output, the other side's socket gets ``shutdown(SHUT_WR)``; the relay ends
  when both directions have ended, or at once when either socket fails.
- At most ``MAX_RELAYS`` relays at once (the host's ``limits.CONNECTIONS_PER_BOX``); a connection beyond them, or
  one whose egress socket cannot be reached (a box without the door), is closed at once.
"""

from __future__ import annotations

import asyncio
import errno
import socket

from .lanes import Tunnel
from .tasks import TaskSet

FORWARDER_HOST = "127.0.0.1"
FORWARDER_PORT = 3128
MAX_RELAYS = 256
CHUNK = 64 * 1024
CONNECT_TIMEOUT_S = 10.0  # a Unix connect completes at once or never; this only bounds the odd case
ACCEPT_RETRY_S = 0.1  # out of descriptors: let relays end before accepting again
BACKLOG = 128


class Forwarder:
    """Listens on ``host:port`` (port 0: any free port, for tests) and relays to ``egress_socket``."""

    def __init__(self, egress_socket: str, *, host: str = FORWARDER_HOST, port: int = FORWARDER_PORT,
                 max_relays: int = MAX_RELAYS, chunk: int = CHUNK) -> None:
        self.egress_socket = egress_socket
        self.host = host
        self.requested_port = port
        self.max_relays = max_relays
        self.chunk = chunk
        self.refused = 0  # connections closed at once: too many relays
        self.unreachable = 0  # connections closed at once: the egress socket could not be reached
        self._listener: socket.socket | None = None
        self._relays = TaskSet()
        self._tasks = TaskSet()

    @property
    def port(self) -> int:
        """The port listened on (useful when asked for port 0)."""
        assert self._listener is not None, "start() first"
        return self._listener.getsockname()[1]

    @property
    def relays(self) -> int:
        """Relays running now (connecting to the egress socket included)."""
        return len(self._relays)

    async def start(self) -> None:
        """Bind and listen; raises OSError when the address cannot be had."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.requested_port))
            listener.listen(BACKLOG)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._tasks.spawn(self._accept_loop(listener), name="egress-forwarder-accept")

    async def close(self) -> None:
        """Stop listening and end every relay (both of its sockets closed)."""
        await self._tasks.cancel_all()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        await self._relays.cancel_all()

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    await asyncio.sleep(ACCEPT_RETRY_S)
                continue  # ECONNABORTED and the like: that client is gone, the next one is not
            client.setblocking(False)
            if len(self._relays) >= self.max_relays:
                self.refused += 1
                client.close()
                continue
            self._relays.spawn(self._relay(client), name="egress-relay")

    async def _relay(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.setblocking(False)
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(loop.sock_connect(upstream, self.egress_socket), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                self.unreachable += 1
                return
            await relay(client, upstream, self.chunk)
        finally:
            upstream.close()
            client.close()


async def relay(one: socket.socket, other: socket.socket, chunk: int = CHUNK) -> None:
    """Move bytes between two connected non-blocking sockets until both directions have ended (EOF passed on as
    ``shutdown(SHUT_WR)``) or either fails, holding at most ``chunk`` bytes per direction (``lanes``: from the
    job's TCP connection the kernel splices, from the egress socket one buffer is reused). The caller closes the
    sockets."""
    tunnel = Tunnel(one, other, chunk=chunk)
    tunnel.start()
    try:
        await tunnel.finished
    finally:
        tunnel.stop()
