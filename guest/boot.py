"""The boot configuration: read once from the boot socket (at most 1 MiB, strict JSON, closed schema)."""

from __future__ import annotations

import socket
import time
from typing import NamedTuple

from . import protocol

MAX_BOOT_BYTES = 1 << 20


class BootError(Exception):
    """The boot configuration could not be read or is invalid."""


class JobUser(NamedTuple):
    """The in-box user every exec runs as (never the guest's own uid), and its home."""

    uid: int
    gid: int
    home: str


class BootConfig(NamedTuple):
    """What the host tells the guest at boot (immutable; a NamedTuple, so the guest does not load ``dataclasses``:
    ~2.5 ms of every box's start)."""

    box_id: str
    env: dict[str, str]
    workspace: str
    agent_socket: str
    exec_timeout_ms: int  # 0: no limit
    max_execs: int
    clock_ms: int
    base_dir: str
    upper_dir: str
    job: JobUser | None = None  # None only where the guest runs outside a box (tests on the host)
    egress_socket: str = protocol.BOOT_PATH_DEFAULTS["egress_socket"]  # where the forwarder relays to

    @classmethod
    def from_json(cls, data: bytes) -> BootConfig:
        try:
            obj = protocol.validate_boot(protocol.loads_strict(data))
        except protocol.ProtocolError as exc:
            raise BootError(f"invalid boot config: {exc}") from None
        return cls(box_id=obj["box_id"], env=dict(obj["env"]), workspace=obj["workspace"],
                   agent_socket=obj["agent_socket"], exec_timeout_ms=obj["limits"]["exec_timeout_ms"],
                   max_execs=obj["limits"]["max_execs"], clock_ms=obj["clock"], base_dir=obj["base_dir"],
                   upper_dir=obj["upper_dir"], job=JobUser(**obj["job"]) if "job" in obj else None,
                   egress_socket=obj["egress_socket"])


def read_boot_config(path: str, timeout_s: float = 30.0) -> BootConfig:
    """Connect to the boot socket and read one configuration until EOF, within ``timeout_s`` of its first byte.

    Before that byte the guest waits as long as the host lets it: a box started ahead (the host's pool) waits
    here, its imports done, until it is taken. The host keeps its own deadline on that wait, and the connection
    ends (so does the guest) when the host closes it."""
    chunks: list[bytes] = []
    total = 0
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.settimeout(None)
            data = sock.recv(65536)
            deadline = time.monotonic() + timeout_s
            while data:
                total += len(data)
                if total > MAX_BOOT_BYTES:
                    raise BootError(f"boot config exceeds {MAX_BOOT_BYTES} bytes")
                chunks.append(data)
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                data = sock.recv(65536)
    except TimeoutError:
        raise BootError(f"boot config not received within {timeout_s:g} s") from None
    except OSError as exc:
        raise BootError(f"cannot read the boot socket {path}: {exc.strerror or exc}") from None
    return BootConfig.from_json(b"".join(chunks))
