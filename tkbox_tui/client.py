"""The only code on the operator side that speaks to the daemon: typed calls over its Unix socket, and the event stream.

Used by the CLI and (through the same methods) by the console.  Errors from the daemon
arrive as ``DaemonError`` with the daemon's code and message; no daemon is ``DaemonUnreachable``.  Whatever goes
wrong on the socket (no daemon, a daemon that hangs up, a reply that is not JSON, one over its size cap) arrives as
one of those two, never as a library's exception.

The transport is small on purpose, so that a command starts like a small program: HTTP/1.1 read by a small strict
parser (``client_http``, ``client_http_reply``) and the exec's WebSocket (``client_ws_upgrade``, ``client_ws_frames``,
``client_exec``).  Under a running event loop every call is asynchronous (asyncio streams, ``client_http_async``,
``client_ws``); with no loop running, a call does its I/O on a blocking socket and its coroutine finishes at its
first step, so a one-shot CLI command drives it without asyncio (``tkbox_tui.cli.loopless``; ``tkbox exec`` uses
``client_exec.BlockingExecCall`` and ``client_ws_blocking``).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from tkbox_daemon.limits import API_MESSAGE, API_REPLY, PATCH_SIZE
from tkbox_daemon.wire import (
    EXPORT_HEADERS,
    ApprovalInfo,
    BoxInfo,
    Event,
    EventPage,
    ExecInfo,
    ExecOutput,
    RememberedRule,
    RunExport,
    daemon_runtime_dir,
)

from .client_errors import NO_DAEMON_HINT, DaemonError, DaemonUnreachable, error_from, json_reply, lost
from .client_http import Head, HttpExchange, LineSplitter, collect_blocking, pieces_blocking, request_target

if TYPE_CHECKING:  # imported where they are used: a command pays only for the replies it reads
    from tkbox_daemon.wire_apply import ApplyReport
    from tkbox_daemon.wire_egress import AllowlistChangeInfo, AllowlistInfo
    from tkbox_daemon.wire_host import HostReport

    from .client_exec import ExecCall

__all__ = ["NO_DAEMON_HINT", "DaemonClient", "DaemonError", "DaemonUnreachable", "box_path", "default_socket"]

T = TypeVar("T")
ANSWERS = ("approve", "reject")
ALLOWLIST_ACTIONS = ("allow", "block", "set")


def box_path(ref: str) -> str:
    """``/boxes/REF`` with REF as one percent-encoded path segment, whatever the person typed (``a/b``, ``x?y``);
    ``.`` and ``..``, which a URL would resolve away to another route, are no box's name or id."""
    if ref in ("", ".", ".."):
        raise DaemonError("not_found", f"box {ref!r} not found; list boxes with: tkbox ls", 404)
    return "/boxes/" + quote(ref, safe="")


def approval_path(approval_id: str) -> str:
    """``/approvals/ID`` with ID as one percent-encoded path segment (``.`` and ``..`` are no approval's id)."""
    if approval_id in ("", ".", ".."):
        raise DaemonError("not_found", f"approval {approval_id!r} not found", 404,
                          hint="list them with: tkbox approvals")
    return "/approvals/" + quote(approval_id, safe="")


def remembered_path(box_ref: str, rule_id: str) -> str:
    """``/boxes/BOX/remembered/RULE`` with each reference as one percent-encoded segment."""
    if rule_id in ("", ".", ".."):
        raise DaemonError("not_found", f"remembered rule {rule_id!r} not found", 404)
    return box_path(box_ref) + "/remembered/" + quote(rule_id, safe="")


def parsed_reply(parse: Callable[[Any], T], reply: Any, what: str) -> T:
    """``parse(reply)``, with a reply that is not what the API promises as a DaemonError (never a KeyError)."""
    try:
        return parse(reply)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DaemonError("bad_reply", f"the daemon's reply is not {what}: {exc}") from None


def _approval_list(reply: Any) -> list[ApprovalInfo]:
    items = reply["approvals"]
    if not isinstance(items, list):
        raise TypeError("approvals is not a list")
    return [ApprovalInfo.from_json(item) for item in items]


def default_socket() -> Path:
    return Path(daemon_runtime_dir()) / "api.sock"


def _no_loop_running() -> bool:
    """Whether this call runs outside an event loop (then its I/O blocks; see the module's docstring)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


class DaemonClient:
    def __init__(self, socket_path: Path | None = None) -> None:
        self.socket_path = Path(socket_path or default_socket())

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Nothing to release: each call has its own connection, closed when the call ends."""

    async def _exchange(self, exchange: HttpExchange) -> tuple[Head, bytes]:
        if _no_loop_running():
            return collect_blocking(self.socket_path, exchange)
        from .client_http_async import collect_async

        return await collect_async(self.socket_path, exchange)

    async def _pieces(self, exchange: HttpExchange) -> AsyncIterator[Head | bytes]:
        """A streamed reply's head, then its body chunks as they arrive."""
        if _no_loop_running():
            blocking = pieces_blocking(self.socket_path, exchange)
            try:
                for piece in blocking:
                    yield piece
            finally:
                blocking.close()  # the socket closes now, also when the reader stopped early
            return
        from .client_http_async import pieces_async

        async with aclosing(pieces_async(self.socket_path, exchange)) as pieces:
            async for piece in pieces:
                yield piece

    async def _stream(self, method: str, path: str, what: str, json_body: Any = None,
                      params: dict[str, str] | None = None) -> AsyncIterator[bytes]:
        """A streamed reply's body chunks, once its head says it is no refusal (a refusal is read whole, capped)."""
        exchange = HttpExchange(method, request_target(path, params), json_body=json_body, what=what)
        async with aclosing(self._pieces(exchange)) as pieces:
            async for piece in pieces:
                if isinstance(piece, Head):
                    if piece.status >= 400:
                        raise error_from(piece.status, await _refusal_body(pieces))
                    continue
                yield piece

    async def _request(self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None,
                       data: bytes | None = None, cap: int = API_REPLY.default) -> Any:
        """One call: its JSON reply, or ``(body, headers)`` for any other content type; a status of 400 or more is
        the daemon's DaemonError."""
        exchange = HttpExchange(method, request_target(path, params), json_body=json, data=data, body_cap=cap)
        head, body = await self._exchange(exchange)
        if head.status >= 400:
            raise error_from(head.status, body)
        if head.content_type == "application/json":
            return json_reply(body)
        return body, head.headers

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/health")

    async def host_report(self, *, refresh: bool = False) -> HostReport:
        """What the daemon's host gives a box (``tkbox doctor``), as the daemon checked it."""
        from tkbox_daemon.wire_host import HostReport

        return HostReport.from_json(await self._request("GET", f"/host?refresh={'true' if refresh else 'false'}"))

    async def boxes(self) -> list[BoxInfo]:
        reply = await self._request("GET", "/boxes")
        return [BoxInfo.from_json(item) for item in reply["boxes"]]

    async def box(self, ref: str) -> BoxInfo:
        return BoxInfo.from_json(await self._request("GET", box_path(ref)))

    async def create_box(self, settings: dict[str, Any]) -> BoxInfo:
        return BoxInfo.from_json(await self._request("POST", "/boxes", json=settings))

    async def stop_box(self, ref: str) -> BoxInfo:
        return BoxInfo.from_json(await self._request("POST", box_path(ref) + "/stop"))

    async def remove_box(self, ref: str) -> BoxInfo:
        return BoxInfo.from_json(await self._request("DELETE", box_path(ref)))

    async def diff(self, ref: str) -> dict[str, Any]:
        return await self._request("GET", box_path(ref) + "/diff", params={"format": "json"})

    async def diff_patch(self, ref: str) -> bytes:
        """The box's patch byte for byte (``diff`` gives it as JSON, with bytes that are not UTF-8 replaced)."""
        reply = await self._request("GET", box_path(ref) + "/diff", cap=PATCH_SIZE.default)
        if not isinstance(reply, tuple):
            raise DaemonError("http_error", "the daemon answered the patch request with JSON, not a patch")
        return reply[0]

    async def execs(self, ref: str) -> list[ExecInfo]:
        """The box's execs, oldest first: command, decision, end and the sizes of the output kept."""
        reply = await self._request("GET", box_path(ref) + "/execs")
        return [ExecInfo.from_json(item) for item in reply["execs"]]

    async def exec_output(self, ref: str, exec_id: int) -> ExecOutput:
        """One exec of the box with the tails of its output the daemon kept (box bytes: show them escaped)."""
        return ExecOutput.from_json(await self._request("GET", box_path(ref) + f"/execs/{exec_id}"))

    async def stored_events(self, after: int = 0, box: str | None = None) -> list[Event]:
        params = {"after": str(after), "follow": "0", **({"box": box} if box else {})}
        reply = await self._request("GET", "/events", params=params)
        return [Event.from_json(item) for item in reply["events"]]

    async def event_page(self, before: int | None = None, limit: int = 500, box: str | None = None) -> EventPage:
        """The last ``limit`` events with seq < ``before`` (the newest without it), oldest first, of ``box`` alone if
        given; ``more``: older ones may exist (ask again with ``before=page.events[0].seq``)."""
        params = {"limit": str(limit), **({"before": str(before)} if before is not None else {}),
                  **({"box": box} if box else {})}
        reply = await self._request("GET", "/events/page", params=params)
        return parsed_reply(EventPage.from_json, reply, "a page of events")

    async def events(self, after: int = 0, box: str | None = None) -> AsyncIterator[Event]:
        """Live events after ``after``; ends when the daemon closes the stream (the caller resumes from the last).
        Each event is at most ``api_message`` bytes (docs/limits.md)."""
        params = {"after": str(after), **({"box": box} if box else {})}
        lines = LineSplitter(API_MESSAGE.default, "event")
        data_lines: list[bytes] = []
        try:
            async with aclosing(self._stream("GET", "/events", "event stream", params=params)) as chunks:
                async for chunk in chunks:
                    for line in lines.feed(chunk):
                        line = line.removesuffix(b"\r")
                        if line.startswith(b"data: "):
                            data_lines.append(line[6:])
                            if sum(map(len, data_lines)) > API_MESSAGE.default:
                                raise DaemonError("reply_too_large", "the daemon sent an event over "
                                                  f"{API_MESSAGE.default} bytes")
                        elif not line and data_lines:
                            yield parsed_reply(Event.from_json, json_reply(b"\n".join(data_lines)), "an event")
                            data_lines = []
        except DaemonError as error:
            if error.code != "daemon_lost":
                raise

    async def approvals(self, box: str | None = None, pending_only: bool = False) -> list[ApprovalInfo]:
        """Approvals across every box, oldest first: every pending one, and (unless ``pending_only``) the answered,
        expired, withdrawn and lost ones the daemon still keeps; ``box`` (name or id) keeps one box's."""
        params = {**({"box": box} if box else {}), **({"state": "pending"} if pending_only else {})}
        reply = await self._request("GET", "/approvals", params=params)
        return parsed_reply(_approval_list, reply, "a list of approvals")

    async def approval(self, approval_id: str) -> ApprovalInfo:
        reply = await self._request("GET", approval_path(approval_id))
        return parsed_reply(ApprovalInfo.from_json, reply, "an approval")

    async def answer_approval(self, approval_id: str, answer: str, *, reason: str = "",
                              remember: bool = False) -> ApprovalInfo:
        """Answer a pending approval (``approve`` or ``reject``) as whoever runs this process (the daemon reads the
        socket's peer credentials); ``remember`` (approve only) also approves later identical asks in that box.
        Returns the answered approval; an approval already answered or expired is a DaemonError (409)."""
        if answer not in ANSWERS:
            raise ValueError(f"an answer is one of {ANSWERS}, not {answer!r}")
        if remember and answer != "approve":
            raise ValueError("remember goes with approve only")
        body: dict[str, Any] = {"answer": answer}
        if reason:
            body["reason"] = reason
        if remember:
            body["remember"] = True
        reply = await self._request("POST", approval_path(approval_id), json=body)
        return parsed_reply(ApprovalInfo.from_json, reply, "an approval")

    async def forget_rule(self, box_ref: str, rule_id: str) -> RememberedRule:
        """Remove a box's remembered rule (``rem-…``): later asks it would have approved go to a person again."""
        reply = await self._request("DELETE", remembered_path(box_ref, rule_id))
        return parsed_reply(lambda value: RememberedRule.from_json(value["removed"]), reply, "a removed rule")

    async def allowlist(self, ref: str) -> AllowlistInfo:
        """The box's egress allowlist as it is now: entries in order (``!`` before a block), presets, pinned names."""
        from tkbox_daemon.wire_egress import AllowlistInfo

        reply = await self._request("GET", box_path(ref) + "/allowlist")
        return parsed_reply(AllowlistInfo.from_json, reply, "an allowlist")

    async def change_allowlist(self, ref: str, action: str, items: list[str], *,
                               dry_run: bool = False) -> AllowlistChangeInfo:
        """``allow`` or ``block`` hosts (``preset:NAME`` too), or ``set`` the whole list (``[]``: the kill switch),
        as whoever runs this process (the daemon reads the socket's peer credentials). ``dry_run`` shows the change
        and the earlier attempts it would let through without making it."""
        if action not in ALLOWLIST_ACTIONS:
            raise ValueError(f"an allowlist change is one of {ALLOWLIST_ACTIONS}, not {action!r}")
        body: dict[str, Any] = {action: list(items)}
        if dry_run:
            body["dry_run"] = True
        from tkbox_daemon.wire_egress import AllowlistChangeInfo

        reply = await self._request("POST", box_path(ref) + "/allowlist", json=body)
        return parsed_reply(AllowlistChangeInfo.from_json, reply, "an allowlist change")

    async def apply_preview(self, ref: str, *, only: list[str] | None = None) -> ApplyReport:
        """A dry run of ``tkbox apply``: per file its action, sizes, whether it is sensitive, whether the checkout
        still holds its pre-image, and the policy's verdict; nothing is recorded or written."""
        async for item in self.apply(ref, dry_run=True, only=only):
            if not isinstance(item, tuple):  # the report
                return item
        raise lost()

    async def apply(self, ref: str, *, dry_run: bool = False, only: list[str] | None = None,
                    allow_sensitive: bool = False) -> AsyncIterator[ApplyReport | tuple[str, ApprovalInfo]]:
        """Apply the stopped box's patch to its checkout (docs/apply.md). Yields ``(path, approval)`` for each file
        held for a person while it waits, then the ``ApplyReport``. Leaving the iteration early (or losing the
        connection) withdraws what is still held and writes nothing."""
        body: dict[str, Any] = {"dry_run": dry_run, "allow_sensitive": allow_sensitive}
        if only is not None:
            body["only"] = list(only)
        lines = LineSplitter(API_REPLY.default, "apply answer line")
        async with aclosing(self._stream("POST", box_path(ref) + "/apply", "apply answer", body)) as chunks:
            async for chunk in chunks:
                for line in lines.feed(chunk):
                    item = _apply_line(line)
                    yield item
                    if not isinstance(item, tuple):  # the report: the answer's last line
                        return
        if lines.pending.strip():  # a last line without its newline
            item = _apply_line(lines.pending)
            yield item
            if not isinstance(item, tuple):
                return
        raise lost()

    async def export_bundle(self, ref: str, sink: Callable[[bytes], None],
                            progress: Callable[[int, int], None] | None = None) -> RunExport:
        """Export a stopped box's run (the daemon closes it first if it is open): the bundle's bytes go to ``sink``
        as they arrive, ``progress(received, total)`` after each chunk. Returns what was exported once every byte
        arrived and their SHA-256 is the one the daemon announced; otherwise raises DaemonError ``export_broken``
        (and what ``sink`` got is not the bundle: discard it)."""
        exchange = HttpExchange("POST", request_target(box_path(ref) + "/export"), what="bundle")
        import hashlib
        from datetime import UTC, datetime

        announced: RunExport | None = None
        digest = hashlib.sha256()
        received = 0
        try:
            async with aclosing(self._pieces(exchange)) as pieces:
                async for piece in pieces:
                    if isinstance(piece, Head):
                        if piece.status >= 400:
                            raise error_from(piece.status, await _refusal_body(pieces))
                        announced = _announced_export(piece.headers)
                        continue
                    assert announced is not None  # the head comes first
                    received += len(piece)
                    if received > announced.size:
                        raise _broken(f"the daemon sent more than the {announced.size} bytes it announced")
                    digest.update(piece)
                    sink(piece)
                    if progress is not None:
                        progress(received, announced.size)
        except DaemonError as error:
            if error.code != "daemon_lost" or announced is None:
                raise
            raise _broken("the daemon broke the bundle off before its end (the signer's bytes did not match what "
                          "it announced, or the signer went away)") from None
        if announced is None:
            raise lost()
        found = "sha256:" + digest.hexdigest()
        if received != announced.size or found != announced.sha256:
            raise _broken(f"the bundle received ({received} bytes, {found}) is not the one announced "
                          f"({announced.size} bytes, {announced.sha256})")
        return RunExport(announced.run_id, found, received, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))

    async def trust(self) -> dict[str, Any]:
        """The trust document pinning the signer's keys (what ``tkbox verify --trust`` reads), through the daemon."""
        reply = await self._request("GET", "/trust")
        return parsed_reply(_trust_document, reply, "a trust document")

    def exec(self, ref: str) -> ExecCall:
        from .client_exec import ExecCall

        return ExecCall(self, ref)


async def _refusal_body(pieces: AsyncIterator[Head | bytes]) -> bytes:
    """The rest of a streamed reply that turned out to be a refusal: its JSON error, read up to ``api_message``."""
    body = bytearray()
    async for piece in pieces:
        if isinstance(piece, bytes):
            body += piece
            if len(body) > API_MESSAGE.default:
                break
    return bytes(body[: API_MESSAGE.default])


def _apply_line(raw: bytes) -> ApplyReport | tuple[str, ApprovalInfo]:
    """One line of an apply's answer: a held file, or the report."""
    from tkbox_daemon.wire_apply import ApplyReport

    value = json_reply(raw)
    try:
        if isinstance(value, dict) and value.get("type") == "held" and isinstance(value.get("path"), str):
            return value["path"], ApprovalInfo.from_json(value.get("approval"))
        if isinstance(value, dict) and value.get("type") == "report":
            return ApplyReport.from_json(value.get("report"))
    except ValueError as exc:
        raise DaemonError("bad_reply", f"the daemon's apply answer is not understood: {exc}") from None
    raise DaemonError("bad_reply", "the daemon's apply answer has a line that is neither held nor report")


def _announced_export(headers: dict[str, str]) -> RunExport:
    """What the daemon announced of an export before its bytes (``EXPORT_HEADERS``, looked up by their lower-case
    names, as ``Head`` keeps them), checked as it is parsed."""
    announced = {key: headers.get(name.lower()) for key, name in EXPORT_HEADERS.items()}
    size = announced["size"] or ""
    value = {"run_id": announced["run_id"], "sha256": announced["sha256"],
             "size": int(size) if size.isascii() and size.isdigit() else -1, "exported_at": ""}
    return parsed_reply(RunExport.from_json, value, "an export's announcement (run id, size, sha256)")


def _trust_document(reply: Any) -> dict[str, Any]:
    document = reply["trust"]
    if not isinstance(document, dict):
        raise TypeError("trust is not an object")
    return document


def _broken(message: str) -> DaemonError:
    return DaemonError("export_broken", message, hint="nothing was kept; export again: tkbox export BOX -o FILE")
