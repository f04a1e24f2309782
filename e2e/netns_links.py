"""Waiting, on the kernel's own events, until network links of a namespace are operationally up.

A veth's carrier comes on when both ends are up, but the kernel marks it usable (operstate UP, real transmit
queue, IPv6 running on it) later, from a work queue: until then packets are dropped, and a first connect costs a
1 s retransmit.  ``links_up_watch`` subscribes to the namespace's link events (a NETLINK_ROUTE socket opened from
a thread that entered the namespace: a socket stays in the namespace it was made in) before the caller brings
the links up, then reads the current state and the events until every named link reports UP.  Nothing polls.

The messages come from the kernel (not from anything a test controls); the reader still stops at the first
length that does not fit.
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

CLONE_NEWNET = 0x40000000
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_DONE, NLMSG_ERROR = 3, 2
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFLA_IFNAME, IFLA_OPERSTATE = 3, 16
IF_OPER_UP = 6
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_ATTRIBUTE = struct.Struct("=HH")  # rtattr: length, type

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]


class LinksWatch:
    """Link events of one namespace, subscribed; ``wait_up`` returns once every named link is UP."""

    def __init__(self, events: socket.socket, namespace: str) -> None:
        self._events = events
        self.namespace = namespace

    def wait_up(self, devices: Iterable[str], bound_s: float) -> None:
        waiting = set(devices)
        request = _HEADER.pack(_HEADER.size + _IFINFO.size, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
        self._events.send(request + _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        deadline = time.monotonic() + bound_s
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._events], [], [], remaining)[0]:
                raise TimeoutError(f"links {sorted(waiting)} of namespace {self.namespace} were not up within "
                                   f"{bound_s} s")
            for name, operstate in link_states(self._events.recv(1 << 16)):
                if operstate == IF_OPER_UP:
                    waiting.discard(name)


@contextmanager
def links_up_watch(namespace_path: Path) -> Iterator[LinksWatch]:
    """Subscribe to link events inside the namespace at ``namespace_path`` for the block."""
    events = _netlink_socket_in(namespace_path)
    try:
        yield LinksWatch(events, namespace_path.name)
    finally:
        events.close()


def link_states(data: bytes) -> Iterator[tuple[str, int]]:
    """(name, operstate) of each RTM_NEWLINK message in one netlink datagram."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _flags, _sequence, _port = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            return
        if kind == RTM_NEWLINK and length >= _HEADER.size + _IFINFO.size:
            attributes = _attributes(data[offset + _HEADER.size + _IFINFO.size:offset + length])
            if IFLA_IFNAME in attributes and IFLA_OPERSTATE in attributes:
                yield attributes[IFLA_IFNAME].split(b"\0", 1)[0].decode(), attributes[IFLA_OPERSTATE][0]
        offset += (length + 3) & ~3


def _attributes(data: bytes) -> dict[int, bytes]:
    found = {}
    offset = 0
    while offset + _ATTRIBUTE.size <= len(data):
        length, kind = _ATTRIBUTE.unpack_from(data, offset)
        if length < _ATTRIBUTE.size or offset + length > len(data):
            break
        if length > _ATTRIBUTE.size:
            found[kind & 0x3FFF] = data[offset + _ATTRIBUTE.size:offset + length]
        offset += (length + 3) & ~3
    return found


def _netlink_socket_in(namespace_path: Path) -> socket.socket:
    """A NETLINK_ROUTE socket subscribed to link events, made by a thread that entered the namespace (setns
    changes the network namespace of the calling thread only; the thread ends right after)."""
    made: list[socket.socket | BaseException] = []

    def enter_and_subscribe() -> None:
        try:
            descriptor = os.open(namespace_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(descriptor, CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into {namespace_path}: {os.strerror(error)}")
            finally:
                os.close(descriptor)
            events = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
            events.bind((0, RTMGRP_LINK))
            made.append(events)
        except BaseException as error:  # handed to the caller's thread below
            made.append(error)

    thread = threading.Thread(target=enter_and_subscribe, name=f"netlink-{namespace_path.name}")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]
