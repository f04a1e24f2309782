"""A box's egress channel as the daemon runs it: the socket made with the box, the proxy environment every exec
gets (and may not change), and the channel closed as soon as a stop begins. The unisolated test backend runs the
real guest on the host (without its forwarder); real boxes are in e2e/test_egress_forwarder_e2e.py."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from tests.daemon_harness import make_workspace, run_exec, running_daemon
from tkbox_daemon.doors.commands import ExecRefused, ExecRequest, check_request
from tkbox_daemon.rules import EGRESS_PROXY_URL, OTHER_PROXY_ENV_NAMES, PROXY_ENV

WAIT = 30.0
HOST_CWD = "/tmp"


@pytest.mark.parametrize("name", [*PROXY_ENV, *OTHER_PROXY_ENV_NAMES])
def test_a_per_exec_proxy_variable_is_refused_naming_it_and_the_boxs_proxy(name):
    with pytest.raises(ExecRefused) as refused:
        check_request(ExecRequest(argv=("curl", "https://example.invalid"), env={name: "http://elsewhere:8080"}))
    assert refused.value.rule == "env"
    assert name in str(refused.value) and EGRESS_PROXY_URL in str(refused.value)


def test_every_exec_is_pointed_at_the_forwarder_and_loopback_is_not_proxied():
    assert {PROXY_ENV[name] for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")} == {
        "http://127.0.0.1:3128"}
    assert PROXY_ENV["NO_PROXY"] == PROXY_ENV["no_proxy"] == "localhost,127.0.0.1"


async def test_a_box_gets_its_egress_socket_and_every_exec_the_proxy_environment(tmp_path):
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        box = daemon.manager.get("t1")
        assert box.egress is not None and box.egress.path == box.runtime_dir / "egress.sock"
        info = os.lstat(box.egress.path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == box.uid
        result = await run_exec(client, "t1", ["env"], cwd=HOST_CWD)
        shown = dict(line.split("=", 1) for line in result["stdout"].decode().splitlines())
        assert {name: shown.get(name) for name in PROXY_ENV} == PROXY_ENV
        refused = await run_exec(client, "t1", ["env"], env={"HTTPS_PROXY": "http://x"}, cwd=HOST_CWD)
        assert refused["end"]["type"] == "error" and "HTTPS_PROXY" in refused["end"]["message"]


class Holding:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@pytest.mark.parametrize("ending", ["stop", "fail"])
async def test_a_stop_or_failure_closes_the_egress_listener_and_its_connections_first(tmp_path, ending):
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        box = daemon.manager.get("t1")
        assert box.egress is not None
        handler = Holding()
        box.egress_handler = handler  # the proxy plugs in the same way
        box.egress.box_uid = os.getuid()  # this test connects in place of the guest
        reader, writer = await asyncio.open_unix_connection(str(box.egress.path))
        await asyncio.wait_for(handler.started.wait(), WAIT)
        egress_open_when_guest_asked: list[bool] = []
        link_request = box.link.request

        async def request(op: str, *args: object, **kwargs: object) -> object:
            if op == "shutdown":
                egress_open_when_guest_asked.append(box.egress.open_connections > 0 or box.egress.path.exists())
            return await link_request(op, *args, **kwargs)

        box.link.request = request  # type: ignore[method-assign]
        if ending == "stop":
            await client.stop_box("t1")
            assert egress_open_when_guest_asked == [False]
        else:
            await box.fail("a test failure")
        assert handler.cancelled.is_set() and box.egress.open_connections == 0
        try:
            assert await asyncio.wait_for(reader.read(), WAIT) == b""
        except ConnectionResetError:
            pass
        writer.close()
        assert not box.egress.path.exists()
        with pytest.raises(OSError):
            await asyncio.open_unix_connection(str(box.egress.path))
