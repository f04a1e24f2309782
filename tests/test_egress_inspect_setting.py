"""The ``inspect`` setting through the daemon's real API and proxy (in process, real signer, the unisolated test
backend; this test connects to the box's egress socket in place of the guest): ``bound`` holds a host off the
list for a person, ``all`` refuses it at once without an approval; the setting is checked, shown and recorded."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.boxes.settings import INSPECT_MODES, SettingsError, inspect_markdown, parse_settings

WAIT = 30.0
CONNECT = b"CONNECT other.example:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n"


async def _connect(box) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    box.egress.box_uid = os.getuid()  # this test connects in place of the guest
    return await asyncio.open_unix_connection(str(box.egress.path))


async def test_an_inspect_all_box_refuses_a_host_off_the_list_at_once_and_holds_nothing(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path)), "inspect": "all"})
        assert info.inspect == "all"
        box = daemon.manager.get("t1")
        reader, writer = await _connect(box)
        writer.write(CONNECT)
        answer = await asyncio.wait_for(reader.read(65536), WAIT)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 403") and b"egress-off-list" in answer and b"inspects all" in answer
        assert box.approvals.pending_count() == 0 and await client.approvals() == []
        assert box.settings.public()["inspect"] == "all"  # the tkbox.box observation commits public()


async def test_a_bound_box_holds_the_same_host_and_an_allow_would_let_the_held_connection_through(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        assert info.inspect == "bound"
        box = daemon.manager.get("t1")
        events = client.events(box="t1")
        reader, writer = await _connect(box)
        writer.write(CONNECT)
        pending = await asyncio.wait_for(_first(events, "approval.pending"), WAIT)
        assert pending.data["approval"]["kind"] == "host" and "other.example" in str(pending.data["approval"])
        dry_run = await client.change_allowlist("t1", "allow", ["other.example"], dry_run=True)
        assert [dict(item) for item in dry_run.would_let_through] == [  # the connection held right now
            {"host": "other.example", "port": 443, "kind": "https", "outcome": "held"}]
        writer.close()


async def _first(events, kind: str):
    async for event in events:
        if event.kind == kind:
            return event
    raise AssertionError(f"the event stream ended before {kind}")


@pytest.mark.parametrize("value", ["ALL", "none", "", 1, True, None, ["all"]])
def test_a_wrong_inspect_mode_is_refused_naming_both_modes(value):
    with pytest.raises(SettingsError) as raised:
        parse_settings({"workspace": str(Path.cwd()), "inspect": value}, default_name="b", environ={})
    assert raised.value.field == "inspect" and all(mode in str(raised.value) for mode in INSPECT_MODES)


def test_the_docs_table_of_inspect_modes_is_the_one_in_the_code():
    text = (Path(__file__).parents[1] / "docs" / "egress.md").read_text()
    section = text.split("<!-- inspect:begin -->\n", 1)[1].split("<!-- inspect:end -->", 1)[0]
    assert section == inspect_markdown()
