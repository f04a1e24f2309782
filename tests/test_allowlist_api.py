"""A box's egress allowlist through the daemon's real API: it starts from the box's settings (presets expanded,
names pinned), changes while the box runs (allow, block, set, down to empty), each change made by the caller the
socket names, recorded in the box's signed run as ``tkbox.allowlist`` and announced as ``egress.allowlist``, and
read by the box on its next connection. Real signer in process, the test-only unisolated backend."""

from __future__ import annotations

import asyncio
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.egress.allowlist import Attempt
from tkbox_daemon.signer import commitments
from tkbox_daemon.signer_link import SignerCallError
from tkbox_daemon.wire_egress import AllowlistChangeInfo, AllowlistInfo
from tkbox_tui.client import DaemonClient, DaemonError

ME = f"uid {os.getuid()} ({pwd.getpwuid(os.getuid()).pw_name})"


async def _create(client: DaemonClient, tmp_path: Path, **settings: Any) -> Any:
    return await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path)), **settings})


async def _observed(daemon: Any, run_id: str, source: str) -> list[dict[str, Any]]:
    """The ``input.observed`` records of ``source`` in the run (the signer keeps a salted commitment to each value:
    ``_commits`` says whether one is to a given value)."""
    service = daemon.signer.service
    await service.store.drain()
    records = [record.event for record in service.run_records(service.book.runs[run_id])]
    return [r["data"] for r in records if r["type"] == "input.observed" and r["data"]["source"] == source]


def _commits(daemon: Any, observed: dict[str, Any], value: Any) -> bool:
    salt = daemon.signer.service.keys.salt(f"input.observed:{observed['salt_id']}")
    return observed["output"] == commitments.commit(salt, value)


async def test_a_box_starts_with_its_settings_list_and_says_so(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path, allow=["preset:pypi", "Example.com:8443", "preset:go-proxy"],
                             resolve={"up.test": ["93.184.216.7"]})
        entries = ["pypi.org", "files.pythonhosted.org", "example.com:8443", "proxy.golang.org", "sum.golang.org"]
        assert info.allow == entries and info.allow_presets == ["pypi", "go-proxy"]
        assert info.resolve == {"up.test": ["93.184.216.7"]}
        assert await client.allowlist("t1") == AllowlistInfo(info.id, "t1", "running", tuple(entries),
                                                             ("pypi", "go-proxy"), {"up.test": ["93.184.216.7"]})
        [start] = [e for e in await client.stored_events(box="t1") if e.kind == "egress.allowlist"]
        assert start.data["action"] == "start" and start.data["entries"] == entries
        assert start.data["notes"][0].startswith("WARNING preset:go-proxy: ")
        [box_record] = await _observed(daemon, info.run_id, "tkbox.box")
        settings = daemon.manager.get("t1").settings
        assert _commits(daemon, box_record, {"box_id": info.id, **settings.public()})
        assert settings.public()["allow"] == entries and settings.public()["resolve"] == {"up.test": ["93.184.216.7"]}
        box = daemon.manager.get("t1")
        assert box.egress_allowlist.match("pypi.org", 443, "https") is not None


async def test_a_wrong_setting_creates_no_box(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        for settings, field in (({"allow": ["127.1"]}, "allow"), ({"resolve": ["up.test=010.0.0.1"]}, "resolve")):
            (tmp_path / field).mkdir()
            with pytest.raises(DaemonError) as raised:
                await _create(client, tmp_path / field, **settings)
            assert raised.value.code == "invalid_settings" and raised.value.extra["field"] == field
        assert daemon.manager.list() == []


async def test_allow_and_block_change_the_list_the_box_reads_recorded_with_who(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path, allow=["*.example.com"])
        box = daemon.manager.get("t1")
        assert box.egress_allowlist.match("new.test", 443, "https") is None
        allowed = await client.change_allowlist("t1", "allow", ["new.test", "git.test:22"])
        assert allowed.applied and allowed.by == ME and allowed.added == ("new.test", "git.test:22")
        assert box.egress_allowlist.match("new.test", 443, "https") is not None  # the next connection sees it
        assert box.egress_allowlist.names_port("git.test", 22) is not None
        blocked = await client.change_allowlist("t1", "block", ["api.example.com", "new.test"])
        assert blocked.added == ("!api.example.com",) and blocked.removed == ("new.test",)
        assert box.egress_allowlist.match("api.example.com", 443, "https") is None
        assert box.egress_allowlist.match("www.example.com", 443, "https") is not None
        assert (await client.box("t1")).allow == ["*.example.com", "git.test:22", "!api.example.com"]
        events = [e.data for e in await client.stored_events(box="t1") if e.kind == "egress.allowlist"]
        assert [e["action"] for e in events] == ["start", "allow", "block"] and events[2]["by"] == ME
        await client.remove_box("t1")
        records = await _observed(daemon, info.run_id, "tkbox.allowlist")
        assert [(r["trust"], r["must_keep"]) for r in records] == [("trusted", True)] * 2
        assert _commits(daemon, records[0], {"action": "allow", "by": ME, "added": ["new.test", "git.test:22"],
                                             "removed": [], "presets": [], "notes": [], "count": 3,
                                             "entries": ["*.example.com", "new.test", "git.test:22"]})
        assert _commits(daemon, records[1], {**events[2], "action": "block"})
        assert events[2]["entries"] == ["*.example.com", "git.test:22", "!api.example.com"]


async def test_set_to_nothing_is_the_kill_switch(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path, allow=["preset:github"])
        emptied = await client.change_allowlist("t1", "set", [])
        assert emptied.applied and emptied.allowlist.entries == () and len(emptied.removed) == 5
        assert daemon.manager.get("t1").egress_allowlist.match("github.com", 443, "https") is None
        assert "kill switch" in emptied.notes[0]
        await client.remove_box("t1")
        [record] = await _observed(daemon, info.run_id, "tkbox.allowlist")
        [event] = [e.data for e in await client.stored_events(box="t1") if e.kind == "egress.allowlist"][1:]
        assert _commits(daemon, record, event) and event["entries"] == [] and event["count"] == 0


async def test_a_dry_run_shows_the_change_and_what_it_would_have_let_through_and_changes_nothing(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        box = daemon.manager.get("t1")
        for attempt in (Attempt("pkg.test", 443, "https", "held"), Attempt("pkg.test", 22, "tcp", "rejected"),
                        Attempt("other.test", 443, "https", "expired"), Attempt("pkg.test", 80, "http", "refused")):
            box.allowlist.note_attempt(attempt)
        preview = await client.change_allowlist("t1", "allow", ["pkg.test"], dry_run=True)
        assert not preview.applied and preview.added == ("pkg.test",) and preview.allowlist.entries == ()
        assert preview.would_let_through == ({"host": "pkg.test", "port": 443, "kind": "https", "outcome": "held"},)
        assert box.egress_allowlist.match("pkg.test", 443, "https") is None
        assert [e.kind for e in await client.stored_events(box="t1")].count("egress.allowlist") == 1
        await client.remove_box("t1")
        assert await _observed(daemon, info.run_id, "tkbox.allowlist") == []


async def test_a_change_that_changes_nothing_is_not_recorded(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path, allow=["a.test"])
        again = await client.change_allowlist("t1", "allow", ["a.test"])
        absent = await client.change_allowlist("t1", "block", ["b.test"])
        assert not again.applied and again.notes == ("a.test was already allowed",)
        assert not absent.applied and "b.test was not allowed" in absent.notes[0]
        await client.remove_box("t1")
        assert await _observed(daemon, info.run_id, "tkbox.allowlist") == []


WRONG_CHANGES = [
    ({"allow": ["127.1"]}, 400, "invalid_allowlist", "127.1"),
    ({"allow": ["!a.test"]}, 400, "invalid_allowlist", "tkbox block BOX a.test"),
    ({"allow": []}, 400, "invalid_allowlist", "at least one host"),
    ({"allow": ["a.test", "localhost"]}, 400, "invalid_allowlist", "single label"),
    ({"allow": ["a.test"], "block": ["b.test"]}, 400, "invalid_request", "exactly one of"),
    ({}, 400, "invalid_request", "exactly one of"),
    ({"allow": "a.test"}, 400, "invalid_request", "list of strings"),
    ({"allow": ["a.test"], "dry_run": 1}, 400, "invalid_request", "dry_run"),
    ({"allow": ["a.test"], "force": True}, 400, "invalid_request", "unknown field"),
    ({"set": ["x.test"] * 1001}, 400, "invalid_allowlist", "allowlist_entries"),
]


async def test_a_wrong_change_is_refused_and_changes_nothing(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path, allow=["keep.test"])
        for body, status, code, words in WRONG_CHANGES:
            with pytest.raises(DaemonError) as raised:
                await client._request("POST", "/boxes/t1/allowlist", json=body)
            assert (raised.value.status, raised.value.code) == (status, code), body
            assert words in raised.value.message, body
        assert (await client.allowlist("t1")).entries == ("keep.test",)
        assert [e.kind for e in await client.stored_events(box="t1")].count("egress.allowlist") == 1


async def test_a_stopped_box_keeps_its_list_but_takes_no_change(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path, allow=["a.test"])
        await client.stop_box("t1")
        with pytest.raises(DaemonError) as raised:
            await client.change_allowlist("t1", "allow", ["b.test"])
        assert raised.value.status == 409 and raised.value.code == "box_not_running"
        assert (await client.allowlist("t1")).entries == ("a.test",)
        with pytest.raises(DaemonError) as missing:
            await client.allowlist("nope")
        assert missing.value.status == 404


def test_the_change_answer_round_trips_and_refuses_what_the_api_does_not_promise():
    info = AllowlistInfo("b1", "t1", "running", ("a.test", "!b.a.test"), ("pypi",), {"up.test": ["192.0.2.1"]})
    assert AllowlistInfo.from_json(info.to_json()) == info
    change = AllowlistChangeInfo("allow", ME, ("a.test",), (), True, info, ("pypi",), ("note",),
                                 ({"host": "a.test", "port": 443, "kind": "https", "outcome": "held"},))
    assert AllowlistChangeInfo.from_json(change.to_json()) == change
    for broken in ({**info.to_json(), "entries": "a.test"}, {**info.to_json(), "resolve": {"a": "b"}}, []):
        with pytest.raises(ValueError):
            AllowlistInfo.from_json(broken)
    with pytest.raises(ValueError):
        AllowlistChangeInfo.from_json({**change.to_json(), "applied": "yes"})


async def test_a_widening_change_takes_effect_only_once_its_record_is_kept_a_narrowing_one_at_once(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path, allow=["old.test"])
        box = daemon.manager.get("t1")
        recorder, seen_while_recording = box.recorder, []
        keep = recorder.observe_kept

        async def observe_kept(source: str, value: Any) -> None:
            seen_while_recording.append((box.egress_allowlist.match("new.test", 443, "https") is not None,
                                         box.egress_allowlist.match("old.test", 443, "https") is not None))
            await keep(source, value)

        recorder.observe_kept = observe_kept
        await client.change_allowlist("t1", "allow", ["new.test"])
        await client.change_allowlist("t1", "block", ["old.test"])
        assert seen_while_recording == [(False, True), (True, False)]  # new.test waits; old.test goes at once


async def test_a_widening_change_whose_record_is_refused_is_not_made_and_stops_the_box(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path, allow=["old.test"])
        box = daemon.manager.get("t1")
        events = client.events(box="t1")

        async def refused(source: str, value: Any) -> None:
            raise SignerCallError("refused", "the signer is out of space")

        box.recorder.observe_kept = refused
        with pytest.raises(DaemonError) as raised:
            await client.change_allowlist("t1", "allow", ["new.test"])
        assert raised.value.status == 503 and raised.value.code == "not_recorded"
        assert "was not made" in str(raised.value) and "out of space" in str(raised.value)
        assert box.egress_allowlist.match("new.test", 443, "https") is None

        async def stopped() -> None:
            async for event in events:
                if event.kind in ("box.stopped", "box.failed"):
                    return

        await asyncio.wait_for(stopped(), 30)
        assert box.state in ("stopped", "failed") and box.recorder.gaps.counts.get("must_keep_refused") == 1
