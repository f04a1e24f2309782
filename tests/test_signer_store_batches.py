"""The store's group commit: a small batch is made durable on the event loop itself (a lone decision does not wait
for a thread hand-off), a larger one in a thread (the loop decides the next requests meanwhile); either way every
record in a batch is on disk, in order, before its future resolves."""

from __future__ import annotations

import asyncio

from tkbox_daemon.signer import store as store_module
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.store import INLINE_BATCH, LOG_NAME, LogStore


def _store(tmp_path) -> LogStore:
    paths = SignerPaths(tmp_path / "data", tmp_path / "run")
    paths.ensure()
    store = LogStore(paths.store_dir, load_or_create(paths.keys_dir), durable=True)
    store.open(lambda record: None)
    return store


async def _batch(store: LogStore, size: int) -> None:
    submitted = [store.submit("run-1", "observation", {"n": n}) for n in range(size)]
    for record, future in submitted:
        await future
        with open(store.store_dir / LOG_NAME, "rb") as log:
            assert record.line in log.read()  # on disk once its future resolves


async def test_a_small_batch_is_written_on_the_loop_and_a_large_one_in_a_thread(tmp_path, monkeypatch):
    store = _store(tmp_path)
    threads: list[int] = []
    real_to_thread = asyncio.to_thread

    async def counted(function, *args):
        threads.append(args[0].count(b"\n"))  # the records in the batch
        return await real_to_thread(function, *args)

    monkeypatch.setattr(store_module.asyncio, "to_thread", counted)
    try:
        await _batch(store, INLINE_BATCH)
        assert threads == []
        await _batch(store, INLINE_BATCH + 1)
        assert threads == [INLINE_BATCH + 1]
    finally:
        store.close()
