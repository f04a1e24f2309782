"""What the console needs from a daemon client: ``tkbox_tui.client.DaemonClient`` satisfies it, tests pass a fake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from tkbox_daemon.wire import BoxInfo, Event


class ExecCallLike(Protocol):
    """One running exec (``tkbox_tui.client.ExecCall``)."""

    async def start(self, argv: list[str], *, cwd: str = ..., env: dict[str, str] | None = ...,
                    stdin: bytes | None = ..., stream_stdin: bool = ..., timeout: int | None = ...) -> None: ...

    async def signal(self, name: str) -> None: ...

    def messages(self) -> AsyncIterator[dict[str, Any] | tuple[int, bytes]]: ...

    async def close(self) -> None: ...


class ConsoleClient(Protocol):
    """The daemon calls the console makes; every one of them runs in a worker, never on the UI's critical path."""

    async def boxes(self) -> list[BoxInfo]: ...

    async def box(self, ref: str) -> BoxInfo: ...

    async def create_box(self, settings: dict[str, Any]) -> BoxInfo: ...

    async def stop_box(self, ref: str) -> BoxInfo: ...

    async def remove_box(self, ref: str) -> BoxInfo: ...

    def events(self, after: int = 0, box: str | None = None) -> AsyncIterator[Event]: ...

    def exec(self, ref: str) -> ExecCallLike: ...

    async def close(self) -> None: ...
