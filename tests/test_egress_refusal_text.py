"""What a box's client reads when the proxy refuses an address, through the daemon's real API and proxy (in process,
real signer, the unisolated test backend; this test connects to the box's egress socket in place of the guest):
the reason is one sentence that names the address once, says where it sits, and never repeats its subject."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.daemon_harness import make_workspace, running_daemon

WAIT = 30.0
METADATA = ("169.254.169.254 is in 169.254.169.254/32: instance metadata: AWS, GCP (metadata.google.internal), "
            "Azure,")


async def _answer(box, authority: str) -> str:
    """What a CONNECT to ``authority`` on the box's egress socket is answered."""
    box.egress.box_uid = os.getuid()  # this test connects in place of the guest
    reader, writer = await asyncio.open_unix_connection(str(box.egress.path))
    writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    answer = (await asyncio.wait_for(reader.read(65536), WAIT)).decode()
    writer.close()
    return answer


async def _refusal(box, authority: str) -> str:
    """The ``reason:`` line of the 403 a CONNECT to ``authority`` gets."""
    answer = await _answer(box, authority)
    assert answer.startswith("HTTP/1.1 403") and "rule: egress-address" in answer, answer
    return next(line for line in answer.splitlines() if line.startswith("reason: ")).removeprefix("reason: ")


@pytest.mark.parametrize(("authority", "begins"), [
    ("169.254.169.254:443", METADATA),
    ("[::ffff:169.254.169.254]:443", "::ffff:a9fe:a9fe carries 169.254.169.254 (IPv4-mapped), which " + METADATA[16:]),
    ("docs.example:443", "docs.example (93.184.216.9) is in 93.184.216.0/24: blocked by the operator"),
])
async def test_an_address_refusal_names_the_address_once_and_where_it_is(tmp_path, authority, begins):
    async with running_daemon(tmp_path, egress_block=("93.184.216.0/24",)) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path)),
                                 "allow": ["docs.example"], "resolve": {"docs.example": ["93.184.216.9"]}})
        reason = await _refusal(daemon.manager.get("t1"), authority)
    assert reason.startswith(begins), reason
    assert reason.endswith(": boxes never reach it")
    assert reason.count(" is in ") == 1, reason  # the address is placed once, not "A is A is in ..."


async def test_what_to_do_names_the_box_so_the_command_can_be_pasted(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "strict-1", "workspace": str(make_workspace(tmp_path)), "inspect": "all"})
        events = client.events(box="strict-1")
        answer = await _answer(daemon.manager.get("strict-1"), "other.example:443")
        async for event in events:
            if event.kind == "egress.refused":
                break
    assert "what to do: allow it with: tkbox allow strict-1 other.example\n" in answer, answer
    assert event.data["hint"] == "allow it with: tkbox allow strict-1 other.example"


def test_only_the_box_placeholder_of_a_tkbox_command_is_filled_in():
    from tkbox_daemon.egress.proxy import for_box

    assert for_box("tkbox allow BOX HOST:PORT; tkbox block BOX a.example; see tkbox allowlist BOX", "web-1") == (
        "tkbox allow web-1 HOST:PORT; tkbox block web-1 a.example; see tkbox allowlist web-1")
    assert for_box("a BOXED answer; tkbox allowBOX; BOX", "web-1") == "a BOXED answer; tkbox allowBOX; BOX"
