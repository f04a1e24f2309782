"""``tkbox signer serve``: run the signer in the foreground until SIGTERM or SIGINT.

One signer per runtime directory: ``signer.lock`` is flocked for the process's life.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from ..policy import PolicyError, load_pack
from ..policy.context import signer_context
from ..processes import AlreadyRunning, take_lock
from .keys import KeyFileError, load_or_create
from .paths import PathError, SignerPaths
from .server import SignerServer
from .service import SignerService
from .store import LogStore, StoreCorrupt

log = logging.getLogger("tkbox.signer")


class SignerStartError(RuntimeError):
    """The signer cannot start; the message says why and what to do."""


def _take_lock(paths: SignerPaths) -> int:
    try:
        return take_lock(paths.lock_file)
    except AlreadyRunning:
        raise SignerStartError(
            f"another signer is already running on {paths.runtime_dir}; use it, or stop it with: tkbox signer down"
        ) from None


async def serve(paths: SignerPaths, *, pack_name: str = "default", durable: bool = True) -> None:
    paths.ensure()
    lock_fd = _take_lock(paths)
    try:
        keys = load_or_create(paths.keys_dir)
        pack = load_pack(pack_name, signer_context(paths, os.getpid()))
        store = LogStore(paths.store_dir, keys, durable=durable)
        service = SignerService(keys, store, pack)
        await service.start()
        if service.recovery.get("torn_bytes"):
            log.warning("set aside a torn log tail of %s bytes in %s", service.recovery["torn_bytes"],
                        service.recovery["torn_file"])
        if store.error:
            log.error("the store cannot be written (%s): every decision will be refused", store.error)
        server = SignerServer(service, paths.socket)
        await server.start()
        paths.pid_file.write_text(f"{os.getpid()}\n")
        log.info("signer %s serving on %s (log %s, %s records)", os.getpid(), paths.socket, keys.log_id, store.size)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        log.info("signer stopping")
        await server.close()
        store.close()
        paths.pid_file.unlink(missing_ok=True)
    finally:
        os.close(lock_fd)


def serve_main(pack_name: str = "default") -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s signer %(levelname)s %(message)s", stream=sys.stderr)
    try:
        asyncio.run(serve(SignerPaths.from_env(), pack_name=pack_name))
    except (SignerStartError, PathError, StoreCorrupt, PolicyError, KeyFileError) as exc:
        print(f"tkbox signer: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tkbox_daemon.signer.process")
    parser.add_argument("--pack", default="default")
    raise SystemExit(serve_main(parser.parse_args().pack))
