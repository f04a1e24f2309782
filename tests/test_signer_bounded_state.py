"""The signer's memory stays bounded however many decisions it signs: only pending decisions, a sparse index and a
bounded idempotency window stay in memory; completed decisions, retries' replies and ``read`` come back from the log,
also after a restart.  A retry inside the window gets its first answer; one the window forgot is refused, never
recorded twice."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.policy import PolicyContext, load_pack
from tkbox_daemon.signer import store as store_module
from tkbox_daemon.signer.idempotency import ReplyWindow, RequestExpired, new_request_id
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.service import SignerService
from tkbox_daemon.signer.state import RUN_INDEX_STRIDE
from tkbox_daemon.signer.store import LogStore

OWNER = "uid:0"
WINDOW = 40


class Signer:
    """An in-process signer on a real store, with a small idempotency window."""

    def __init__(self, base: Path, loop: Any) -> None:
        self.paths = SignerPaths(base / "data", base / "run")
        self.paths.ensure()
        self.loop = loop
        keys = load_or_create(self.paths.keys_dir)
        pack = load_pack("default", PolicyContext(str(self.paths.data_dir), str(self.paths.runtime_dir), os.getpid()))
        self.store = LogStore(self.paths.store_dir, keys, durable=False)
        self.service = SignerService(keys, self.store, pack)
        self.service.book.window = ReplyWindow(limit=WINDOW)
        loop.run_until_complete(self.service.start())

    def call(self, method: str, **fields: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self.service.handle(OWNER, {"method": method, **fields}))

    def register(self) -> dict[str, str]:
        reply = self.call("register_run", request_id=new_request_id(), agent={"name": "bounded"})
        return {"run_id": reply["run_id"], "run_token": reply["run_token"]}

    def close(self) -> None:
        self.loop.run_until_complete(self.store.drain())
        self.store.close()


@pytest.fixture
def loop() -> Iterator[Any]:
    import asyncio

    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _exec(signer: Signer, run: dict[str, str], n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    decided = signer.call("decide", request_id=new_request_id(), **run, tool="Bash", args={"command": f"echo {n}"})
    completed = signer.call("complete", request_id=new_request_id(), **run, decision_id=decided["decision_id"],
                            status="ok", exit_code=0)
    return decided, completed


def test_memory_holds_only_pending_decisions_a_sparse_index_and_the_window(tmp_path, loop):
    signer = Signer(tmp_path, loop)
    run = signer.register()
    first, _ = _exec(signer, run, 0)
    for n in range(1, 1500):
        _exec(signer, run, n)
    left_open = signer.call("decide", request_id=new_request_id(), **run, tool="Bash", args={"command": "sleep 1"})
    state = signer.service.book.runs[run["run_id"]]
    assert list(state.pending) == [left_open["decision_id"]]
    assert len(signer.service.book.window) <= WINDOW
    assert len(state.seq_marks) == -(-state.records // RUN_INDEX_STRIDE)
    assert len(signer.store.marks) == -(-signer.store.size // store_module.INDEX_STRIDE)
    # a completed decision left memory but is still known: completing it again is refused as consumed
    again = signer.call("complete", request_id=new_request_id(), **run, decision_id=first["decision_id"],
                        status="ok")
    assert again["error"]["code"] == "decision_consumed"
    unknown = signer.call("complete", request_id=new_request_id(), **run, decision_id="dec-" + "0" * 15 + "1" + "f" * 16,
                          status="ok")
    assert unknown["error"]["code"] == "unknown_decision"
    signer.close()


def test_read_pages_through_a_run_from_the_log(tmp_path, loop):
    signer = Signer(tmp_path, loop)
    run, other = signer.register(), signer.register()
    for n in range(400):  # two runs interleaved, so a run's records are not contiguous in the log
        _exec(signer, run, n)
        _exec(signer, other, n)
    loop.run_until_complete(signer.store.drain())
    for start in (0, 1, 255, 256, 257, 700, 799, 800, 801):
        page = signer.call("read", **run, from_seq=start, limit=50)
        expected = list(range(start, min(start + 50, 801)))
        assert [r["run_seq"] for r in page["records"]] == expected
        assert all(r["event"]["run_id"] == run["run_id"] for r in page["records"])
        assert page["next_seq"] == start + len(expected)
    signer.close()


def test_a_retry_in_the_window_gets_its_first_answer_and_records_nothing(tmp_path, loop):
    signer = Signer(tmp_path, loop)
    run = signer.register()
    request = {"request_id": new_request_id(), **run, "tool": "Bash", "args": {"command": "ls"}}
    first = signer.call("decide", **request)
    size = signer.store.size
    assert signer.call("decide", **request) == first
    assert signer.store.size == size
    other = signer.call("decide", **{**request, "args": {"command": "rm -rf /"}})
    assert other["error"]["code"] == "conflict" and signer.store.size == size
    signer.close()


def test_a_retry_the_window_forgot_is_refused_and_never_recorded_twice(tmp_path, loop):
    signer = Signer(tmp_path, loop)
    run = signer.register()
    request = {"request_id": new_request_id(), **run, "tool": "Bash", "args": {"command": "ls"}}
    signer.call("decide", **request)
    for n in range(WINDOW):  # push it out of the window by count
        _exec(signer, run, n)
    size = signer.store.size
    late = signer.call("decide", **request)
    assert late["error"]["code"] == "request_expired" and "window" in late["error"]["message"]
    assert signer.store.size == size
    signer.close()


def test_a_request_stamped_before_the_windows_span_or_far_ahead_is_refused(tmp_path, loop):
    import time

    signer = Signer(tmp_path, loop)
    run = signer.register()
    for stamp, words in ((time.time() - 601, "window"), (time.time() + 60, "ahead")):
        reply = signer.call("decide", request_id=new_request_id(stamp), **run, tool="Bash", args={"command": "ls"})
        assert reply["error"]["code"] == "request_expired" and words in reply["error"]["message"]
    reply = signer.call("decide", request_id="req-1", **run, tool="Bash", args={"command": "ls"})
    assert reply["error"]["code"] == "invalid_request" and "new_request_id" in reply["error"]["message"]
    signer.close()


def test_a_restart_rebuilds_pending_decisions_and_the_window_from_the_log(tmp_path, loop):
    signer = Signer(tmp_path, loop)
    run = signer.register()
    for n in range(300):
        _exec(signer, run, n)
    completed, _ = _exec(signer, run, 300)
    pending_request = {"request_id": new_request_id(), **run, "tool": "Bash", "args": {"command": "make"}}
    pending = signer.call("decide", **pending_request)
    signer.close()
    restarted = Signer(tmp_path, loop)
    state = restarted.service.book.runs[run["run_id"]]
    assert list(state.pending) == [pending["decision_id"]]
    assert len(restarted.service.book.window) <= WINDOW
    assert restarted.call("decide", **pending_request) == pending  # a retry across the restart: the same answer
    consumed = restarted.call("complete", request_id=new_request_id(), **run, decision_id=completed["decision_id"],
                              status="ok")
    assert consumed["error"]["code"] == "decision_consumed"
    done = restarted.call("complete", request_id=new_request_id(), **run, decision_id=pending["decision_id"],
                          status="ok", exit_code=0)
    assert "error" not in done and not state.pending
    restarted.close()


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 30), st.integers(-5, 5)), max_size=80),
       limit=st.integers(1, 8), span=st.integers(1, 20))
def test_a_forgotten_request_never_passes_as_new(ops, limit, span):
    """Soundness of the window: once a remembered request is dropped (by count or by time), ``check_new`` refuses it
    at any later time; a request still in the window is found by ``lookup``."""
    window = ReplyWindow(limit=limit, seconds=span)
    now_ms = 100_000
    remembered: dict[str, int] = {}
    for seq, (request, jitter) in enumerate(ops):
        now_ms += 700
        stamp = now_ms + jitter * 300
        request_id = f"req-{stamp:012x}{request:020x}"
        key = ReplyWindow.key(OWNER, request_id)
        if request_id in remembered:
            continue
        try:
            window.check_new(request_id, now_ms)
        except RequestExpired:
            continue
        window.remember(key, request_id, seq, now_ms)
        remembered[request_id] = seq
        assert len(window) <= limit
        for earlier, earlier_seq in remembered.items():
            earlier_key = ReplyWindow.key(OWNER, earlier)
            found = window.lookup(earlier_key)
            if found is None:
                with pytest.raises(RequestExpired):
                    window.check_new(earlier, now_ms)
            else:
                assert found == earlier_seq


def test_the_log_is_replayed_in_chunks_and_a_torn_tail_is_still_set_aside(tmp_path, loop, monkeypatch):
    signer = Signer(tmp_path, loop)
    run = signer.register()
    for n in range(100):
        _exec(signer, run, n)
    pending = signer.call("decide", request_id=new_request_id(), **run, tool="Bash", args={"command": "make"})
    size = signer.store.size
    signer.close()
    log = signer.paths.store_dir / store_module.LOG_NAME
    with log.open("ab") as handle:
        handle.write(b'{"v":1,"event":{"torn')
    monkeypatch.setattr(store_module, "READ_CHUNK", 97)  # lines straddle every chunk boundary
    restarted = Signer(tmp_path, loop)
    assert restarted.service.recovery["records"] == size and restarted.service.recovery["torn_bytes"] == 21
    assert list(restarted.service.book.runs[run["run_id"]].pending) == [pending["decision_id"]]
    page = restarted.call("read", **run, from_seq=195, limit=10)
    assert [r["run_seq"] for r in page["records"]] == list(range(195, 202))  # the run's 202nd record is its last
    restarted.close()
