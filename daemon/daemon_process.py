"""``tkbox daemon``: run the daemon in the foreground until SIGTERM or SIGINT.

It refuses to start without a signer that answers (unless ``--unrecorded``), before it
does anything else.  One daemon per runtime directory (``daemon.lock``).  The API is
served on a Unix socket that only the daemon's user and root can open.  A clean stop
(SIGTERM, SIGINT) answers every pending approval ``lost`` and records it before it
stops the boxes and closes their runs (``api/app.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from .api.app import create_app
from .box import cgroups
from .box.backend import BoxBackend
from .config import DaemonConfig, DaemonPaths
from .limits import APPROVAL_WAIT, BOXES_PER_DAEMON, BOXES_STARTED_AHEAD, MAX_STARTED_AHEAD
from .processes import AlreadyRunning, take_lock
from .signer.paths import PathError, SignerPaths
from .signer_link import AsyncSignerClient, SignerCallError

log = logging.getLogger("tkbox.daemon")
MAX_APPROVAL_WAIT = 3600  # seconds: an action held longer than an hour is better refused and asked again
PR_SET_CHILD_SUBREAPER = 36


class DaemonStartError(RuntimeError):
    """The daemon cannot start; the message says why and what to do."""


def select_backend(name: str) -> BoxBackend:
    """The box backend by name; ``auto`` is bubblewrap when present, else the built-in namespace launcher."""
    import shutil

    from .box.bwrap import BwrapBackend
    from .box.nslauncher import NsBackend

    if name == "fake":
        from .box.fake import FakeBackend

        return FakeBackend()
    if name == "bwrap" or (name == "auto" and shutil.which("bwrap")):
        if not shutil.which("bwrap"):
            raise DaemonStartError("bubblewrap is not installed: run scripts/setup.sh (or apt-get install bubblewrap)")
        return BwrapBackend()
    if name in ("ns", "auto"):
        return NsBackend()
    raise DaemonStartError(f"unknown backend {name!r}; choose auto, bwrap or ns")


async def check_signer(config: DaemonConfig) -> dict[str, object]:
    client = AsyncSignerClient(config.signer.socket)
    try:
        return await client.call("hello")
    except SignerCallError as exc:  # its message names the socket and says how to start a signer: say it once
        raise DaemonStartError(
            f"{exc.message}; or, to record nothing (not recommended): tkbox daemon --unrecorded"
        ) from None
    finally:
        await client.close()


def _take_lock(paths: DaemonPaths) -> int:
    try:
        return take_lock(paths.lock_file)
    except AlreadyRunning:
        raise DaemonStartError(f"a daemon is already running on {paths.runtime_dir}; stop it with: tkbox down") from None


async def serve(config: DaemonConfig, backend: BoxBackend) -> None:
    # Box trees (base copy, /etc, the guest) must be readable by box uids; everything private is created with an
    # explicit 0600/0700 mode, so the daemon's umask is fixed here rather than inherited from a shell.
    os.umask(0o022)
    if not config.unrecorded:
        await check_signer(config)
    else:
        log.warning("UNRECORDED: no signer decides or records anything this daemon does")
    config.paths.ensure()
    lock_fd = _take_lock(config.paths)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    app = create_app(config, backend)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=15)
    await runner.setup()
    socket_path = config.paths.api_socket
    socket_path.unlink(missing_ok=True)
    old_umask = os.umask(0o177)
    try:
        site = web.UnixSite(runner, str(socket_path))
        await site.start()
    finally:
        os.umask(old_umask)
    os.chmod(socket_path, 0o600)
    config.paths.pid_file.write_text(f"{os.getpid()}\n")
    log.info("daemon %s serving on %s (backend %s, %s)", os.getpid(), socket_path, backend.name,
             "UNRECORDED" if config.unrecorded else f"signer {config.signer.socket}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("daemon stopping: stopping every box and closing every run")
        await runner.cleanup()
        socket_path.unlink(missing_ok=True)
        config.paths.pid_file.unlink(missing_ok=True)
        os.close(lock_fd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tkbox daemon", description="Run the tkbox daemon in the foreground.")
    parser.add_argument("--unrecorded", action="store_true",
                        help="start without a signer: nothing is decided or recorded (warns on every command)")
    parser.add_argument("--max-boxes", type=int, default=BOXES_PER_DAEMON.default,
                        help=f"boxes alive at once (default {BOXES_PER_DAEMON.default})")
    parser.add_argument("--start-ahead", type=int, default=BOXES_STARTED_AHEAD.default, metavar="N",
                        help="boxes kept started ahead, without a workspace, so that a create of a box with the "
                             "host image and the default disk size only attaches its workspace (default "
                             f"{BOXES_STARTED_AHEAD.default}, at most {MAX_STARTED_AHEAD}; each reserves its disk on "
                             "the host; 0: none)")
    parser.add_argument("--backend", default="auto", choices=("auto", "bwrap", "ns"),
                        help="how boxes are isolated (default: bwrap when installed, else ns)")
    parser.add_argument("--approval-wait", type=int, default=APPROVAL_WAIT.default, metavar="SECONDS",
                        help="how long an action the policy asks about waits for a person's answer before it is "
                             f"refused (default {APPROVAL_WAIT.default}, at most {MAX_APPROVAL_WAIT})")
    parser.add_argument("--egress-block", action="append", default=[], metavar="NETWORK",
                        help="a network (CIDR) no box may reach through the egress door, beyond the special ranges "
                             "it always refuses (docs/egress.md); repeat it for more")
    parser.add_argument("--cgroup-root", metavar="DIR",
                        help="where the host's cgroup file systems are mounted (default /sys/fs/cgroup): a cgroup2 "
                             "mount or the directory of the v1 hierarchies (docs/box-isolation.md, Limits)")
    return parser


def daemon_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s daemon %(levelname)s %(message)s", stream=sys.stderr)
    if args.max_boxes < 1:
        print("tkbox daemon: --max-boxes must be at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.start_ahead <= MAX_STARTED_AHEAD:
        print(f"tkbox daemon: --start-ahead is 0 to {MAX_STARTED_AHEAD} boxes", file=sys.stderr)
        return 2
    if not 1 <= args.approval_wait <= MAX_APPROVAL_WAIT:
        print(f"tkbox daemon: --approval-wait is 1 to {MAX_APPROVAL_WAIT} seconds", file=sys.stderr)
        return 2
    for network in args.egress_block:
        try:
            ipaddress.ip_network(network, strict=True)
        except ValueError as exc:
            print(f"tkbox daemon: --egress-block {network!r} is not a network ({exc}); give one like 192.0.2.0/24",
                  file=sys.stderr)
            return 2
    if args.cgroup_root is not None:
        try:
            kind = cgroups.configure_root(Path(args.cgroup_root))
        except ValueError as exc:
            print(f"tkbox daemon: --cgroup-root: {exc}", file=sys.stderr)
            return 2
        log.info("boxes use the cgroup %s hierarchy at %s", kind, args.cgroup_root)
    try:
        config = DaemonConfig(DaemonPaths.from_env(), SignerPaths.from_env(), unrecorded=args.unrecorded,
                              max_boxes=args.max_boxes, pool_size=args.start_ahead, backend=args.backend, approval_wait=args.approval_wait,
                              egress_block=tuple(args.egress_block))
        backend = select_backend(args.backend)
        asyncio.run(serve(config, backend))
    except (DaemonStartError, PathError) as exc:
        print(f"tkbox daemon: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(daemon_main(sys.argv[1:]))
