"""The daemon's refusals in the CLI's words: every command that calls the daemon gets them from here.

No daemon reads the same for every command (the message names the socket, the hint is ``NO_DAEMON_HINT``); a box
that does not exist reads as ``report.box_not_found`` says, whichever call found it missing; any other refusal keeps
the daemon's code and message (and the setting it names, as ``field``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..client import NO_DAEMON_HINT, DaemonClient, DaemonError, DaemonUnreachable
from .report import CliError, box_not_found


def from_daemon(error: DaemonError, box: str | None = None) -> CliError:
    """The CliError for a refusal of the daemon; ``box`` is the box the command named, for "not found"."""
    if isinstance(error, DaemonUnreachable):
        return CliError("no_daemon", error.message, NO_DAEMON_HINT)
    if error.code == "not_found" and box is not None:
        return box_not_found(box)
    field = error.extra.get("field")
    field_text = None if field is None else str(field)
    detail = f" (field {field_text})" if field_text is not None and field_text not in error.message else ""
    hint = error.extra.get("hint")
    return CliError(error.code, error.message + detail, hint if isinstance(hint, str) else None, field=field_text)


@asynccontextmanager
async def daemon_client(box: str | None = None) -> AsyncIterator[DaemonClient]:
    """A client of the daemon whose refusals leave as CliError; ``box`` is the box the command names (so a box that
    does not exist reads as every "not found" does)."""
    try:
        async with DaemonClient() as client:
            yield client
    except DaemonError as error:
        raise from_daemon(error, box) from None
