"""The only code on the operator side that speaks to the daemon: typed calls over its Unix socket, and the event stream.

Used by the CLI and (through the same methods) by the console.  Errors from the daemon
arrive as ``DaemonError`` with the daemon's code and message; no daemon is ``DaemonUnreachable``.  Whatever goes
wrong on the socket (no daemon, a daemon that hangs up, a reply that is not JSON) arrives as one of those two,
never as an aiohttp exception.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp

from tkbox_daemon.wire import (
    API_VERSION,
    EXPORT_HEADERS,
    ApprovalInfo,
    BoxInfo,
    Event,
    ExecInfo,
    ExecOutput,
    RememberedRule,
    RunExport,
    daemon_runtime_dir,
)
from tkbox_daemon.wire_apply import ApplyReport
from tkbox_daemon.wire_egress import AllowlistChangeInfo, AllowlistInfo
from tkbox_daemon.wire_host import HostReport

T = TypeVar("T")
STDIN_CHUNK = 64 * 1024
ANSWERS = ("approve", "reject")
ALLOWLIST_ACTIONS = ("allow", "block", "set")
NO_DAEMON_HINT = "start it with: tkbox up (or tkbox daemon)"


class DaemonError(RuntimeError):
    def __init__(self, code: str, message: str, status: int = 0, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.extra = extra


class DaemonUnreachable(DaemonError):
    """Nothing answers on the daemon's socket; ``extra["hint"]`` says how to start one."""

    def __init__(self, message: str) -> None:
        super().__init__("no_daemon", message, hint=NO_DAEMON_HINT)


def _unreachable(socket_path: Path, exc: aiohttp.ClientConnectorError) -> DaemonUnreachable:
    """The same words for every call that finds no daemon (never aiohttp's own text)."""
    reason = exc.os_error.strerror if exc.os_error is not None and exc.os_error.strerror else "nothing accepts"
    return DaemonUnreachable(f"no daemon answers at {socket_path} ({reason})")


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


def _lost() -> DaemonError:
    """The daemon hung up or broke off mid-reply (it stopped, or crashed)."""
    return DaemonError("daemon_lost", "the daemon closed the connection before it answered",
                       hint="see whether it still runs: tkbox ls")


def default_socket() -> Path:
    return Path(daemon_runtime_dir()) / "api.sock"


class DaemonClient:
    def __init__(self, socket_path: Path | None = None) -> None:
        self.socket_path = Path(socket_path or default_socket())
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.UnixConnector(path=str(self.socket_path))
            self._session = aiohttp.ClientSession(connector=connector, base_url="http://tkbox",
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            async with self._http().request(method, f"/{API_VERSION}{path}", **kwargs) as response:
                body = await response.read()
                if response.status >= 400:
                    raise _error_from(response.status, body)
                if response.content_type == "application/json":
                    return _json_reply(body)
                return body, dict(response.headers)
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.socket_path, exc) from None
        except (TimeoutError, aiohttp.ClientError):
            raise _lost() from None

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/health")

    async def host_report(self, *, refresh: bool = False) -> HostReport:
        """What the daemon's host gives a box (``tkbox doctor``), as the daemon checked it."""
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
        reply = await self._request("GET", box_path(ref) + "/diff")
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

    async def events(self, after: int = 0, box: str | None = None) -> AsyncIterator[Event]:
        """Live events after ``after``; ends when the daemon closes the stream (the caller resumes from the last)."""
        params = {"after": str(after), **({"box": box} if box else {})}
        try:
            async with self._http().get(f"/{API_VERSION}/events", params=params) as response:
                if response.status >= 400:
                    raise _error_from(response.status, await response.read())
                data_lines: list[str] = []
                async for raw in response.content:
                    line = raw.decode("utf-8").rstrip("\n")
                    if line.startswith("data: "):
                        data_lines.append(line[6:])
                    elif not line and data_lines:
                        yield Event.from_json(json.loads("\n".join(data_lines)))
                        data_lines = []
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.socket_path, exc) from None
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            return
        except aiohttp.ClientError:
            raise _lost() from None

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
        reply = await self._request("POST", box_path(ref) + "/allowlist", json=body)
        return parsed_reply(AllowlistChangeInfo.from_json, reply, "an allowlist change")

    async def apply_preview(self, ref: str, *, only: list[str] | None = None) -> ApplyReport:
        """A dry run of ``tkbox apply``: per file its action, sizes, whether it is sensitive, whether the checkout
        still holds its pre-image, and the policy's verdict; nothing is recorded or written."""
        async for item in self.apply(ref, dry_run=True, only=only):
            if isinstance(item, ApplyReport):
                return item
        raise _lost()

    async def apply(self, ref: str, *, dry_run: bool = False, only: list[str] | None = None,
                    allow_sensitive: bool = False) -> AsyncIterator[ApplyReport | tuple[str, ApprovalInfo]]:
        """Apply the stopped box's patch to its checkout (docs/apply.md). Yields ``(path, approval)`` for each file
        held for a person while it waits, then the ``ApplyReport``. Leaving the iteration early (or losing the
        connection) withdraws what is still held and writes nothing."""
        body: dict[str, Any] = {"dry_run": dry_run, "allow_sensitive": allow_sensitive}
        if only is not None:
            body["only"] = list(only)
        try:
            async with self._http().post(f"/{API_VERSION}{box_path(ref)}/apply", json=body,
                                         timeout=aiohttp.ClientTimeout(total=None)) as response:
                if response.status >= 400:
                    raise _error_from(response.status, await response.read())
                async for raw in response.content:
                    item = _apply_line(raw)
                    yield item
                    if isinstance(item, ApplyReport):
                        return
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.socket_path, exc) from None
        except (TimeoutError, aiohttp.ClientError):
            raise _lost() from None
        raise _lost()

    async def export_bundle(self, ref: str, sink: Callable[[bytes], None],
                            progress: Callable[[int, int], None] | None = None) -> RunExport:
        """Export a stopped box's run (the daemon closes it first if it is open): the bundle's bytes go to ``sink``
        as they arrive, ``progress(received, total)`` after each chunk. Returns what was exported once every byte
        arrived and their SHA-256 is the one the daemon announced; otherwise raises DaemonError ``export_broken``
        (and what ``sink`` got is not the bundle: discard it)."""
        try:
            async with self._http().post(f"/{API_VERSION}{box_path(ref)}/export") as response:
                if response.status >= 400:
                    raise _error_from(response.status, await response.read())
                announced = _announced_export(response.headers)
                digest = hashlib.sha256()
                received = 0
                async for chunk in response.content.iter_any():
                    received += len(chunk)
                    if received > announced.size:
                        raise _broken(f"the daemon sent more than the {announced.size} bytes it announced")
                    digest.update(chunk)
                    sink(chunk)
                    if progress is not None:
                        progress(received, announced.size)
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.socket_path, exc) from None
        except aiohttp.ClientPayloadError:
            raise _broken("the daemon broke the bundle off before its end (the signer's bytes did not match what "
                          "it announced, or the signer went away)") from None
        except (TimeoutError, aiohttp.ClientError):
            raise _lost() from None
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
        return ExecCall(self, ref)


class ExecCall:
    """One exec over the daemon's WebSocket: send the start, stream stdin, read decision, output and exit."""

    def __init__(self, client: DaemonClient, ref: str) -> None:
        self.client = client
        self.ref = ref
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._credit = 0
        self._credit_arrived = asyncio.Event()

    async def start(self, argv: list[str], *, cwd: str = "/workspace", env: dict[str, str] | None = None,
                    stdin: bytes | None = None, stream_stdin: bool = False, timeout: int | None = None,
                    tty: bool = False, rows: int | None = None, cols: int | None = None) -> None:
        """Open the WebSocket and send the start message.

        ``tty=True`` runs the command on a pseudo-terminal of ``rows`` x ``cols`` (both or neither; the box's
        default 24 x 80 without them): its output arrives as stdout only, stdin (``stream_stdin``) is what is typed,
        and ``resize`` follows the operator's window.
        """
        if (rows is None) != (cols is None) or (rows is not None and not tty):
            raise ValueError("rows and cols come together, and only with tty=True")
        try:
            self.ws = await self.client._http().ws_connect(f"/{API_VERSION}{box_path(self.ref)}/exec",
                                                          max_msg_size=4 << 20)
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 404:  # the handshake carries no body: the daemon's words come from asking for the box
                await self.client.box(self.ref)
            raise DaemonError("exec_failed", f"the daemon refused the exec ({exc.status})", exc.status) from None
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.client.socket_path, exc) from None
        except aiohttp.ClientError:
            raise _lost() from None
        message: dict[str, Any] = {"type": "start", "argv": argv, "cwd": cwd, "env": env or {},
                                   "stdin": "stream" if stream_stdin else ("upfront" if stdin is not None else "none")}
        if stdin is not None:
            message["stdin_data"] = base64.b64encode(stdin).decode()
        if timeout:
            message["timeout"] = timeout
        if tty:
            message["tty"] = True
            if rows is not None:
                message.update(rows=rows, cols=cols)
        await self.ws.send_json(message)

    async def send_stdin(self, data: bytes) -> None:
        """Send stdin within the daemon's credit (granted at start, returned as the process takes it)."""
        assert self.ws is not None
        view = memoryview(data)
        while view:
            while self._credit <= 0:
                self._credit_arrived.clear()
                await self._credit_arrived.wait()
            size = min(len(view), self._credit, STDIN_CHUNK)
            self._credit -= size
            await self.ws.send_bytes(bytes(view[:size]))
            view = view[size:]

    def _grant(self, count: int) -> None:
        self._credit += count
        self._credit_arrived.set()

    async def close_stdin(self) -> None:
        assert self.ws is not None
        await self.ws.send_json({"type": "stdin_eof"})

    async def signal(self, name: str) -> None:
        assert self.ws is not None
        await self.ws.send_json({"type": "signal", "signal": name})

    async def resize(self, rows: int, cols: int) -> None:
        """Tell a tty exec its terminal's new size (1..1000 each; the daemon ignores anything else)."""
        assert self.ws is not None
        await self.ws.send_json({"type": "resize", "rows": rows, "cols": cols})

    async def messages(self) -> AsyncIterator[dict[str, Any] | tuple[int, bytes]]:
        """The daemon's messages as they come: output frames as ``(stream, bytes)``, every other message as its JSON
        object (``decision``, ``held``, ``approved``, ``started``, ``denied``, ``exit``, ``error``, and any type a
        newer daemon adds), except the stdin credit, which is kept here."""
        assert self.ws is not None
        async for message in self.ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                decoded = json.loads(message.data)
                if decoded.get("type") == "stdin_credit":
                    self._grant(int(decoded["bytes"]))
                    continue
                if decoded.get("type") == "started":
                    self._grant(int(decoded.get("stdin_window", 0)))
                yield decoded
            elif message.type == aiohttp.WSMsgType.BINARY:
                yield message.data[0], message.data[1:]
            else:
                break

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


def _apply_line(raw: bytes) -> ApplyReport | tuple[str, ApprovalInfo]:
    """One line of an apply's answer: a held file, or the report."""
    value = _json_reply(raw)
    try:
        if isinstance(value, dict) and value.get("type") == "held" and isinstance(value.get("path"), str):
            return value["path"], ApprovalInfo.from_json(value.get("approval"))
        if isinstance(value, dict) and value.get("type") == "report":
            return ApplyReport.from_json(value.get("report"))
    except ValueError as exc:
        raise DaemonError("bad_reply", f"the daemon's apply answer is not understood: {exc}") from None
    raise DaemonError("bad_reply", "the daemon's apply answer has a line that is neither held nor report")


def _announced_export(headers: Any) -> RunExport:
    """What the daemon announced of an export before its bytes (``EXPORT_HEADERS``), checked as it is parsed."""
    size = headers.get(EXPORT_HEADERS["size"], "")
    value = {"run_id": headers.get(EXPORT_HEADERS["run_id"]), "sha256": headers.get(EXPORT_HEADERS["sha256"]),
             "size": int(size) if size.isascii() and size.isdigit() else -1, "exported_at": ""}
    return parsed_reply(RunExport.from_json, value, "an export's announcement (run id, size, sha256)")


def _trust_document(reply: Any) -> dict[str, Any]:
    document = reply["trust"]
    if not isinstance(document, dict):
        raise TypeError("trust is not an object")
    return document


def _broken(message: str) -> DaemonError:
    return DaemonError("export_broken", message, hint="nothing was kept; export again: tkbox export BOX -o FILE")


def _json_reply(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise DaemonError("bad_reply", "the daemon's reply is not JSON") from None


def _error_from(status: int, body: bytes) -> DaemonError:
    try:
        error = json.loads(body)["error"]
        extra = {k: v for k, v in error.items() if k not in ("code", "message")}
        return DaemonError(str(error["code"]), str(error["message"]), status, **extra)
    except (ValueError, KeyError, TypeError):
        shown = json.dumps(body[:200].decode("utf-8", "replace"))  # JSON spelling, escaped, never b'...'
        return DaemonError("http_error", f"the daemon answered {status}: {shown}", status)
