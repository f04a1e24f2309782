"""A scripted ``FakeDaemonClient`` for console tests: events from an ``asyncio.Queue``, every call recorded.

Put ``Event``s on ``fake.live`` to stream them; put ``DROP_STREAM`` to end the stream as a daemon restart does (the
console must reconnect and resume with ``after=<last seq>``); ``fake.history`` is what a reconnect replays.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tkbox_daemon.wire import BoxInfo, Event, ExecInfo, ExecOutput, OutputTail
from tkbox_tui.client import DaemonError, DaemonUnreachable

DROP_STREAM = object()
FIXED_NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def fixed_clock() -> datetime:
    return FIXED_NOW


def make_box(box_id: str, name: str, state: str = "running", **extra: Any) -> BoxInfo:
    values: dict[str, Any] = dict(
        id=box_id, name=name, state=state, image="host", workspace=f"/home/op/{name}",
        created_at="2025-03-01T11:15:00Z", expires_at="2025-03-01T13:15:00Z", run_id=f"run-{box_id}",
        recorded=True, execs_running=0, execs_total=3, connections_open=1, approvals_pending=0,
        last_event="exec.finished", allow=["api.github.com"],
        secrets=[{"name": "GH_TOKEN", "hosts": ["api.github.com"], "header": "Authorization"}],
        limits={"memory": 2147483648, "cpus": 2, "lifetime": 7200}, backend="bwrap")
    values.update(extra)
    return BoxInfo(**values)


def make_event(seq: int, box_id: str = "b1", kind: str = "exec.finished", **data: Any) -> Event:
    return Event(seq, f"2025-03-01T11:{(seq // 60) % 60:02d}:{seq % 60:02d}Z", box_id, kind, data)


def make_exec(exec_id: int, command: str, state: str = "finished", stdout: bytes = b"", stderr: bytes = b"",
              **extra: Any) -> ExecOutput:
    """An exec as the daemon's history gives it: allowed by ``dev.read``, exit 0 reported by the guest, unless
    ``extra`` says otherwise; ``stdout``/``stderr`` are the kept tails (their sizes fill the record, unless
    ``stdout_tail``/``stderr_tail`` give other ``OutputTail``s)."""
    tails = {name: extra.pop(f"{name}_tail", None) for name in ("stdout", "stderr")}
    values: dict[str, Any] = dict(
        id=exec_id, command=command, state=state, verdict="allow", started_at=f"2025-03-01T11:5{exec_id % 10}:00.000Z",
        rule_ids=("dev.read",), reason="read-only tools", duration_ms=1250,
        exit_code=0 if state == "finished" else None, reported_by="guest" if state == "finished" else "",
        stdout=tails["stdout"] or OutputTail(len(stdout), len(stdout)),
        stderr=tails["stderr"] or OutputTail(len(stderr), len(stderr)))
    values.update(extra)
    return ExecOutput(ExecInfo(**values), stdout, stderr)


class FakeExecCall:
    """An exec whose daemon side is a script: ``outputs`` are sent after start; a signal ends it with 130."""

    def __init__(self, fake: FakeDaemonClient, ref: str) -> None:
        self.fake = fake
        self.ref = ref
        self.argv: list[str] = []
        self.signals: list[str] = []
        self._items: asyncio.Queue[Any] = asyncio.Queue()

    async def start(self, argv: list[str], **options: Any) -> None:
        self.argv = argv
        self.fake.calls.append(("exec", self.ref, tuple(argv)))
        for item in self.fake.exec_script(argv):
            self._items.put_nowait(item)

    async def signal(self, name: str) -> None:
        self.signals.append(name)
        self.fake.calls.append(("signal", self.ref, name))
        self._items.put_nowait({"type": "exit", "exit_code": 130, "signal": 2, "timed_out": False})
        self._items.put_nowait(None)

    async def messages(self) -> AsyncIterator[dict[str, Any] | tuple[int, bytes]]:
        while (item := await self._items.get()) is not None:
            yield item

    async def close(self) -> None:
        self.fake.calls.append(("exec_closed", self.ref))


def default_exec_script(argv: list[str]) -> list[Any]:
    """allow, print the argv, exit 0; ``sleep`` waits for a signal instead of exiting."""
    items: list[Any] = [{"type": "decision", "verdict": "allow", "reason": "rule dev.read"},
                        {"type": "started", "stdin_window": 1 << 20},
                        (1, (" ".join(argv) + "\n").encode())]
    if argv[0] != "sleep":
        items += [{"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}, None]
    return items


class FakeDaemonClient:
    """Implements ``ConsoleClient``; ``calls`` records every call with its arguments in order."""

    def __init__(self, boxes: list[BoxInfo] | None = None) -> None:
        self.box_list = list(boxes or [])
        self.live: asyncio.Queue[Any] = asyncio.Queue()
        self.history: list[Event] = []
        self.calls: list[tuple[Any, ...]] = []
        self.events_after: list[int] = []
        self.unreachable_times = 0
        self.exec_script = default_exec_script
        self.exec_calls: list[FakeExecCall] = []
        self.stream_opened = asyncio.Event()
        self.create_error: DaemonError | None = None
        self.exec_outputs: dict[str, list[ExecOutput]] = {}
        """What ``execs``/``exec_output`` answer, by box id (the daemon's exec history)."""

    async def health(self) -> dict[str, Any]:
        """Like the daemon's: its last sequence number (the newest event of ``history``)."""
        return {"last_seq": max((event.seq for event in self.history), default=0)}

    async def boxes(self) -> list[BoxInfo]:
        self.calls.append(("boxes",))
        if self.unreachable_times:
            self.unreachable_times -= 1
            raise DaemonUnreachable("no daemon answers (fake)")
        return list(self.box_list)

    async def box(self, ref: str) -> BoxInfo:
        self.calls.append(("box", ref))
        for box in self.box_list:
            if ref in (box.id, box.name):
                return box
        raise DaemonError("not_found", f"no box {ref}")

    async def create_box(self, settings: dict[str, Any]) -> BoxInfo:
        self.calls.append(("create_box", settings))
        if self.create_error is not None:
            raise self.create_error
        box = make_box(f"b{len(self.box_list) + 1}", settings.get("name", "generated"), "creating")
        self.box_list.append(box)
        return box

    async def _set_state(self, call: str, ref: str, state: str) -> BoxInfo:
        self.calls.append((call, ref))
        for index, box in enumerate(self.box_list):
            if ref in (box.id, box.name):
                self.box_list[index] = replace(box, state=state)
                return self.box_list[index]
        raise DaemonError("not_found", f"no box {ref}")

    async def stop_box(self, ref: str) -> BoxInfo:
        return await self._set_state("stop_box", ref, "stopped")

    async def remove_box(self, ref: str) -> BoxInfo:
        box = await self._set_state("remove_box", ref, "removed")
        self.box_list = [b for b in self.box_list if b.id != box.id]
        return box

    async def events(self, after: int = 0, box: str | None = None) -> AsyncIterator[Event]:
        self.events_after.append(after)
        self.stream_opened.set()
        for event in self.history:
            if event.seq > after:
                yield event
        while True:
            item = await self.live.get()
            if item is DROP_STREAM:
                return
            if isinstance(item, Exception):
                raise item
            self.history.append(item)
            yield item

    async def execs(self, ref: str) -> list[ExecInfo]:
        """The box's execs as ``exec_outputs[box id]`` holds them (oldest first)."""
        self.calls.append(("execs", ref))
        return [output.exec for output in self.exec_outputs.get(self._box_id(ref), [])]

    async def exec_output(self, ref: str, exec_id: int) -> ExecOutput:
        self.calls.append(("exec_output", ref, exec_id))
        for output in self.exec_outputs.get(self._box_id(ref), []):
            if output.exec.id == exec_id:
                return output
        raise DaemonError("not_found", f"exec {exec_id} of box {ref} not found", 404)

    def _box_id(self, ref: str) -> str:
        return next((box.id for box in self.box_list if ref in (box.id, box.name)), ref)

    def exec(self, ref: str) -> FakeExecCall:
        call = FakeExecCall(self, ref)
        self.exec_calls.append(call)
        return call

    async def close(self) -> None:
        self.calls.append(("close",))


def quiet_settings(config_dir: Any = None, **overrides: Any) -> Any:
    """Settings for tests: no watchers, no blink, immediate reconnects, no ticking clock."""
    from pathlib import Path

    from tkbox_tui.console.settings import ConsoleSettings

    values: dict[str, Any] = dict(watch_themes=False, cursor_blink=False, reconnect_initial=0.0,
                                  reconnect_maximum=0.0, tick_interval=0, render_interval=0.02,
                                  box_refresh_interval=0.05)
    if config_dir is not None:
        values["config_dir"] = Path(config_dir)
    values.update(overrides)
    return ConsoleSettings(**values)


def two_boxes() -> list[BoxInfo]:
    return [make_box("b1", "web-api"), make_box("b2", "batch-jobs", "stopped", execs_total=0, connections_open=0,
                                                 last_event="box.stopped")]


WAIT_UNTIL_LIMIT = 60.0
"""Seconds ``wait_until`` keeps trying: a safety net against a hang, never a timing assertion (a loaded machine
delays the console's render timer far past any number of idle rounds)."""


async def wait_until(pilot: Any, condition: Any, rounds: int = 200) -> None:
    """Let the app run until ``condition()`` holds: ``rounds`` idle rounds (``pilot.pause``) first, then rounds
    that also give the console's timers time to fire, until ``WAIT_UNTIL_LIMIT`` seconds have passed."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause()
    deadline = time.monotonic() + WAIT_UNTIL_LIMIT
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")
