"""Command line: ``python3 -I -S /run/tkbox/guest [--boot-socket PATH] [--agent-socket PATH] [--no-forwarder]``.

Also runs as ``python3 -m tkbox_guest`` (installed) or ``python3 -S -m guest`` from the folder's parent. Under
``-I`` Python puts neither the current directory nor a ``-m`` package's parent on ``sys.path``, so in a box the
guest is started by the path of its folder: Python then runs this file with the folder itself as ``sys.path[0]``.
That entry is swapped for the folder's parent, *appended* after the standard library, so the guest's modules load
as the package ``guest`` and a file the job drops next to the folder can never shadow a standard module.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType, SimpleNamespace

DEFAULT_BOOT_SOCKET = "/run/tkbox/boot.sock"


def _agent_module() -> ModuleType:
    if __package__:
        return importlib.import_module(f"{__package__}.agent")
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        del sys.path[0]
    sys.path.append(os.path.dirname(here))
    return importlib.import_module(f"{os.path.basename(here)}.agent")


DEFAULTS = SimpleNamespace(boot_socket=DEFAULT_BOOT_SOCKET, agent_socket=None, drain_ms=1000, no_forwarder=False)


def parse_args(argv: list[str]) -> SimpleNamespace:
    """The options; in a box there are none (the host starts ``python3 -I -S /run/tkbox/guest``), and then
    argparse, ~10 ms of a box's start with its gettext look-ups, is never loaded."""
    if not argv:
        return SimpleNamespace(**vars(DEFAULTS))
    import argparse

    parser = argparse.ArgumentParser(prog="tkbox-guest", description="The tkbox guest agent (PID 1 in a box).")
    parser.add_argument("--boot-socket", default=DEFAULTS.boot_socket, help="where to read the boot config")
    parser.add_argument("--agent-socket", default=DEFAULTS.agent_socket,
                        help="the agent socket (default: the boot config's agent_socket, /run/tkbox/agent.sock)")
    parser.add_argument("--drain-ms", type=int, default=DEFAULTS.drain_ms,
                        help="how long to wait for an exec's pipes after it ended (default 1000)")
    parser.add_argument("--no-forwarder", action="store_true",
                        help="do not listen on 127.0.0.1:3128 (a guest on a test host, whose loopback is the host's)")
    return parser.parse_args(argv, namespace=SimpleNamespace())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Nothing the launcher left open is ours to keep (bwrap leaves its --userns fd): stdio only, from here on.
    os.closerange(3, 1 << 20)
    # The guest never speaks TLS, yet asyncio imports ssl (and OpenSSL) when it can: ~9 ms of every box's start.
    # A None entry makes ``import ssl`` fail as if it were absent, which asyncio allows (it then has no TLS).
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]
    agent = _agent_module()
    return agent.run(args.boot_socket, args.agent_socket, drain_s=max(0, args.drain_ms) / 1000,
                     forward=not args.no_forwarder)


if __name__ == "__main__":
    sys.exit(main())
