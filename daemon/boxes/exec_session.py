"""One command through the command door: check, decide, run, stream, complete — and stop it if its client goes.

    check_request ─ refused ─▶ ExecRefused (400, names the rule)
    decide(Bash) ─ deny/unreachable ─▶ ExecDenied (exit 126, rule ids, reason, hint); event exec.denied
    decide(Bash) ─ ask ─▶ held: an approval (docs/approvals.md) ─ not approved ─▶ ExecDenied (126, why)
                                                                ─ approved (recorded first) ─▶ runs as decided
    guest exec ─▶ exec.started ─▶ output … ─▶ EXIT ─▶ complete(exit status, streamed stdin digest) ─▶ exec.finished
    guest exec ─ could not start ─▶ ExecRefused (127 not found, else 126: the guest's word); complete(start_failed)

A held exec waits with the host's own deadline (the approval's expiry, then the time to record it); its client is
told (``on_held``) and, when it goes away, the approval is withdrawn.  An approved exec runs exactly as decided:
the same argv, cwd, environment and stdin, under the same decision id.

Output is paced by its client: a chunk's bytes go back to the guest as credit when ``outputs()`` hands the chunk to
the client, or when it is dropped because the client is gone, so a slow client holds back only its own command (the
process blocks on its pipe, as under a slow terminal) and a departed one never leaves the guest waiting for credit.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from .. import limits, strictjson
from ..approvals.registry import Approval, LimitReached, refusal_reason
from ..doors.commands import ExecRefused, ExecRequest, check_request, decision_args
from ..tasks import spawn
from ..wire import ApprovalInfo
from .exec_history import KeptExec
from .guest_link import GuestExec, GuestFailure, GuestTimeout

CLIENT_QUEUE_ITEMS = 256
END_GRACE = limits.EXEC_END_GRACE.default  # seconds past a command's time limit before the host ends the box
ABORT_SIGNAL_WAIT = 5.0  # seconds a departing client's SIGKILL waits for the guest's answer

if TYPE_CHECKING:
    from .box import Box
    from .recorder import Decision

OnHeld = Callable[[dict[str, Any], ApprovalInfo], Awaitable[None]]  # told the decision and the pending approval


@dataclass(frozen=True)
class ExecStart:
    argv: tuple[str, ...]
    cwd: str = "/workspace"
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    stdin_streamed: bool = False
    timeout: int | None = None
    tty: bool = False  # on a pseudo-terminal of rows x cols (the guest's 24 x 80 when not given)
    rows: int | None = None
    cols: int | None = None


class ExecDenied(Exception):
    """The signer (or the lack of one) said no; ``decision`` is what the client is shown."""

    def __init__(self, decision: dict[str, Any]) -> None:
        super().__init__(decision.get("reason", "denied"))
        self.decision = decision


class ExecSession:
    def __init__(self, box: Box, start: ExecStart) -> None:
        self.box = box
        self.start_request = start
        self.request = ExecRequest(argv=start.argv, cwd=start.cwd, env=dict(start.env), stdin=start.stdin,
                                   stdin_streamed=start.stdin_streamed, tty=start.tty)
        self.decision_id: str | None = None
        self.command = ""
        self.guest: GuestExec | None = None
        self.kept: KeptExec | None = None  # this exec on its box's page: decision, end, output tails
        self.approval: ApprovalInfo | None = None  # the approval an ask ran under (approved)
        self._held: Approval | None = None  # while held: the approval it waits for
        self._stdin_hash = hashlib.sha256()
        self._stdin_bytes = 0
        self._finished = False
        self._exit_delivered = False
        self._aborted = False
        self.time_limit_s = 0
        self._to_client: asyncio.Queue[tuple[int, bytes] | dict[str, Any]] = asyncio.Queue(CLIENT_QUEUE_ITEMS)
        self.done = asyncio.Event()

    async def start(self, on_held: OnHeld | None = None) -> dict[str, Any]:
        """Decide and start; returns the decision shown to the client.  An ``ask`` is held until its approval is
        answered (``on_held`` is told first, when a person must answer).  Raises ExecDenied or an API error."""
        check_request(self.request)
        args = decision_args(self.request)
        self.command = args["command"]
        decision = await self.box.decide_exec(args)
        shown = {**decision.to_json(), "command": self.command}
        asks = decision.decision == "ask" and decision.decision_id is not None
        self.kept = self.box.exec_history.begin(self.command, shown, tty=self.request.tty, held=asks)
        if asks:
            await self._wait_for_approval(decision, shown, on_held)
        elif not decision.allowed:
            self.box.emit("exec.denied", {"command": self.command, "rule_ids": list(decision.rule_ids),
                                          "reason": decision.reason, "verdict": decision.verdict})
            raise ExecDenied(shown)
        self.decision_id = decision.decision_id
        start = self.start_request
        self.time_limit_s = start.timeout or self.box.settings.limit("exec_timeout")
        try:
            self.guest = await self.box.start_guest_exec(self, self.time_limit_s,
                                                         start_deadline=self.time_limit_s + END_GRACE)
        except GuestTimeout as exc:  # the guest never said the command started: the box cannot be believed
            reason = f"{exc}; the host ended the box"
            await self._record_host_end("host_time_limit", reason)
            spawn(self.box.fail(f"exec {self.command!r}: {reason}"), name=f"box-fail-{self.box.id}")
            raise GuestFailure(f"the command did not start: {reason}") from None
        except GuestFailure as exc:
            await self._record_host_end("box_ended", str(exc))
            raise GuestFailure(f"the command did not start: {exc}") from None
        except ExecRefused as refused:  # allowed, but it never ran: the decision still gets its completion
            # A status the guest gave (127 not found, 126 cannot execute) is recorded as its word; the host's own
            # refusals (the box's state, its limit of commands) have none.
            await self._record_host_end("start_failed", str(refused), reported_by=refused.reported_by,
                                        exit_code=refused.exit_code if refused.reported_by == "guest" else None)
            raise
        approved = {"approval_id": self.approval.id} if self.approval is not None else {}
        self.box.emit("exec.started", {"command": self.command, "decision_id": self.decision_id,
                                       "rule_ids": list(decision.rule_ids), "verdict": decision.verdict, **approved})
        spawn(self._pump(), name=f"exec-{self.box.id}-{self.guest.id}")
        spawn(self._keep_deadline(), name=f"exec-deadline-{self.box.id}-{self.guest.id}")
        if self.request.stdin is not None:
            await self.guest.send_stdin(self.request.stdin)
            await self.guest.close_stdin()
        elif not self.request.stdin_streamed:
            await self.guest.close_stdin()
        return shown

    async def _wait_for_approval(self, decision: Decision, shown: dict[str, Any], on_held: OnHeld | None) -> None:
        """Hold the exec until its approval is answered (by a person, or at once by remembered rules); return
        only when it is approved (its record kept), else refuse it (ExecDenied)."""
        assert self.kept is not None
        asked = {"command": self.command, "cwd": self.request.cwd, "tty": self.request.tty}
        approvals = self.box.approvals
        try:
            approval = await approvals.request(decision, asked=asked, program=self.request.argv[0],
                                               context={"exec_id": self.kept.info.id})
        except LimitReached as refused:
            self._refuse(shown, str(refused), hint=refused.hint)
        if approval.info.pending:
            self._held = approval
            self.kept.note(f"held for a person's approval ({approval.info.id}, until {approval.info.expires_at}); "
                           f"asked because: {decision.reason}")
            try:
                if on_held is not None:
                    await on_held(shown, approval.info)
                await approvals.wait(approval)
            except BaseException:  # the client could not be told, or its handler ended: nobody waits any more
                spawn(approvals.withdraw(approval, "its client went away"),
                      name=f"approval-withdraw-{approval.info.id}")
                raise
            finally:
                self._held = None
        info = approval.info
        if info.state != "approved":
            self._refuse(shown, refusal_reason(info), approval=info)
        self.approval = info
        self.kept.note(f"approved by {info.answered_by} ({info.id}); asked because: {decision.reason}")

    def _refuse(self, shown: dict[str, Any], reason: str, *, hint: str = "",
                approval: ApprovalInfo | None = None) -> NoReturn:
        """A held exec that will not run: denied on its page, event ``exec.denied``, ExecDenied for its client."""
        assert self.kept is not None
        extra = {"approval_id": approval.id, "state": approval.state} if approval is not None else {}
        self.kept.refuse(f"{reason} (approval {approval.id})" if approval is not None else reason)
        self.box.emit("exec.denied", {"command": self.command, "rule_ids": shown["rule_ids"], "reason": reason,
                                      "verdict": shown["verdict"], **extra})
        denied = {**shown, "reason": reason, **extra}
        if approval is not None:
            denied.pop("hint", None)  # the policy's hint was for the person asked; they have answered
        if hint:
            denied["hint"] = hint
        raise ExecDenied(denied)

    async def withdraw(self, reason: str) -> None:
        """While held: its client went away or interrupted it, so its approval is withdrawn (recorded)."""
        if self._held is not None:
            await self.box.approvals.withdraw(self._held, reason)

    async def _keep_deadline(self) -> None:
        """The host's own time limit: the guest must report the end within the command's limit plus a grace
        (its own kill and drain fit well inside). A box that is held cannot end anything: the clock waits for it
        to run again, then gives one more grace. Missed: the whole box is ended, and the record says so."""
        assert self.guest is not None
        limit = float(self.time_limit_s + END_GRACE)
        while True:
            try:
                await asyncio.wait_for(self.done.wait(), limit)
                return
            except TimeoutError:
                if self.box.state != "held":
                    break
            await self.box.wait_until_not_held()
            limit = float(END_GRACE)
        reason = (f"the guest did not report the end of exec request {self.guest.id} within its "
                  f"{self.time_limit_s} s time limit + {END_GRACE} s grace; the host ended the box")
        exit_info = await self._record_host_end("host_time_limit", reason)
        spawn(self.box.fail(f"exec {self.command!r}: {reason}"), name=f"box-fail-{self.box.id}")
        await self._deliver(exit_info)

    async def write_stdin(self, data: bytes) -> None:
        if self.guest is None or not self.request.stdin_streamed or self._aborted:
            return
        self._stdin_hash.update(data)
        self._stdin_bytes += len(data)
        try:
            await self.guest.send_stdin(data)
        except GuestFailure:
            pass

    async def close_stdin(self) -> None:
        if self.guest is not None:
            try:
                await self.guest.close_stdin()
            except GuestFailure:
                pass

    async def signal(self, signum: int) -> None:
        if self.guest is not None and not self.guest.exited:
            try:
                await self.guest.signal(signum)
            except GuestFailure:
                pass

    async def resize(self, rows: int, cols: int) -> None:
        """Set a pty exec's window size (ignored for an exec without a pty, or one that has ended)."""
        if self.guest is not None and self.start_request.tty and not self.guest.exited and not self._aborted:
            try:
                await self.guest.resize(rows, cols)
            except GuestFailure:
                pass

    async def outputs(self) -> AsyncIterator[tuple[int, bytes] | dict[str, Any]]:
        """Output chunks for the client, then one exit dict (recorded before it is yielded)."""
        while True:
            item = await self._to_client.get()
            self._release(item)  # the client takes it: its bytes become the guest's credit
            yield item
            if isinstance(item, dict):
                return

    def _release(self, item: tuple[int, bytes] | dict[str, Any]) -> None:
        if isinstance(item, tuple) and self.guest is not None:
            self.guest.release_output(len(item[1]))

    def _drop_client_output(self) -> None:
        """Empty the client's queue (nobody reads it any more), giving the output back as credit; an exit stays."""
        kept = []
        while not self._to_client.empty():
            item = self._to_client.get_nowait()
            if isinstance(item, dict):
                kept.append(item)
            else:
                self._release(item)
        for item in kept:
            self._to_client.put_nowait(item)

    async def _pump(self) -> None:
        """Drain the guest's output whether or not a client still listens, and record the completion."""
        assert self.guest is not None
        try:
            while True:
                item = await self.guest.next_output()
                if isinstance(item, GuestFailure):  # the box's channel ended before the guest reported the end
                    await self._deliver(await self._record_host_end("box_ended", str(item)))
                    return
                if isinstance(item, dict):
                    exit_code = item["exit_code"] if item["exit_code"] is not None else 128 + item["signal"]
                    exit_info = {"exit_code": exit_code, "signal": item["signal"], "timed_out": item["timed_out"],
                                 "reported_by": "guest"}
                    await self._finish("ok" if exit_code == 0 else "error", exit_code, exit_info,
                                       reported_by="guest", outcome="reported", reason="")
                    await self._deliver(exit_info)
                    return
                await self._deliver(item)
        finally:
            self.done.set()
            self.box.exec_done(self)

    async def _deliver(self, item: tuple[int, bytes] | dict[str, Any]) -> None:
        if isinstance(item, tuple) and self.kept is not None:  # the box's page keeps the tail, client or not
            self.kept.write(*item)
        # Once the client is gone only the exit is kept (the queue was drained, so it fits): it ends outputs().
        if isinstance(item, dict):
            if self._exit_delivered:
                return
            self._exit_delivered = True
        if self._aborted and not isinstance(item, dict):
            self._release(item)
            return
        await self._to_client.put(item)
        if self._aborted:  # the client went while we waited for room: what we put is nobody's
            self._drop_client_output()

    async def _record_host_end(self, outcome: str, reason: str, *, reported_by: str = "host",
                               exit_code: int | None = None) -> dict[str, Any]:
        """An end the guest did not report as an exit: the host's word (or the guest's refusal to start, with the
        status it stands for). Returns the exit for the client."""
        exit_info = {"exit_code": exit_code, "signal": None, "timed_out": outcome == "host_time_limit",
                     "error": reason, "reported_by": reported_by}
        await self._finish("error", exit_code, exit_info, reported_by=reported_by, outcome=outcome, reason=reason)
        return exit_info

    async def _finish(self, status: str, exit_code: int | None, exit_info: dict[str, Any], *, reported_by: str,
                      outcome: str, reason: str) -> None:
        """Record the completion (in the background: the command has already ended, and the run will not close
        before the completion is answered) and tell the operator. ``reported_by`` says whose word the status
        is; ``outcome`` and ``reason`` are what the host itself saw (docs/format.md, ``tool.result``)."""
        if self._finished:
            return
        self._finished = True
        if self.kept is not None:
            self.kept.end(exit_info, outcome)
        stdin = None
        if self.request.stdin_streamed:
            stdin = {"sha256": "sha256:" + self._stdin_hash.hexdigest(), "size": self._stdin_bytes}
        digest = "sha256:" + hashlib.sha256(strictjson.canonical(
            {"tool": "Bash", "args": decision_args(self.request)})).hexdigest()
        host: dict[str, Any] = {"outcome": outcome, "time_limit_ms": self.time_limit_s * 1000}
        if reason:
            host["reason"] = reason[:1024]
        self.box.complete_exec_soon(self, status=status, exit_code=exit_code, stdin=stdin, args_digest=digest,
                                    reported_by=reported_by, host=host)
        self.box.emit("exec.finished", {"command": self.command, "decision_id": self.decision_id, **exit_info,
                                        "host": host, **({"stdin": stdin} if stdin else {})})

    async def abort(self) -> None:
        """The client is gone or done: stop the process if it still runs (process group, SIGKILL)."""
        self._aborted = True
        self._drop_client_output()  # unblocks the pump; nobody reads these any more
        if self.guest is not None and not self.guest.exited:
            try:
                await self.guest.signal(9, timeout=ABORT_SIGNAL_WAIT)
            except GuestFailure:  # GuestTimeout included: the request is abandoned, its late answer dropped
                pass
