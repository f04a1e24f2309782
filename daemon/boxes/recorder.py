"""A box's run in the signer: registration, decisions, completions, must-keep observations, gaps, closing.

Fail closed: a decision the signer does not answer is a refusal.  A completion that is
refused or unanswered is counted as a gap (the box keeps running).  A must-keep
observation that cannot be queued (4096 waiting) or is refused stops the box, and the
loss is recorded as a ``tkbox.gap`` observation; if even that is refused, the run is
closed with the loss as its reason.  The run token lives only in this object's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..limits import MUST_KEEP_QUEUE
from ..signer_link import AsyncSignerClient, SignerCallError, SignerUnreachable, new_request_id
from ..tasks import spawn

SIGNER_UNAVAILABLE_RULE = "TK-SIGNER-UNAVAILABLE"


@dataclass(frozen=True)
class Decision:
    decision: str  # allow | ask | deny, as the door acts on it
    verdict: str  # allow | flag | ask | deny, as recorded
    decision_id: str | None
    rule_ids: tuple[str, ...]
    reason: str
    hint: str | None = None
    incident: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"decision": self.decision, "verdict": self.verdict, "rule_ids": list(self.rule_ids),
                               "reason": self.reason, "decision_id": self.decision_id}
        if self.hint:
            out["hint"] = self.hint
        return out


class RunBusy(RuntimeError):
    """The run still has decisions or records in flight; it was not closed."""


@dataclass
class GapCounter:
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1


class RunRecorder:
    """Speaks for one box to the signer.  ``stop_box`` is called when a must-keep record is lost."""

    def __init__(self, signer: AsyncSignerClient, box_id: str, *, stop_box: Callable[[str], Awaitable[None]],
                 on_event: Callable[[str, dict[str, Any]], None]) -> None:
        self.signer = signer
        self.box_id = box_id
        self.stop_box = stop_box
        self.on_event = on_event
        self.run_id: str | None = None
        self._token: str | None = None
        self.gaps = GapCounter()
        self.closed = False
        self._must_keep: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue(MUST_KEEP_QUEUE.default)
        self._must_keep_task: asyncio.Task[Any] | None = None
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def _run(self) -> dict[str, str]:
        assert self.run_id and self._token
        return {"run_id": self.run_id, "run_token": self._token}

    async def register(self, box_settings: dict[str, Any], task: str) -> str:
        """Register the run, then record its must-keep ``tkbox.box`` and ``tkbox.task``; returns the run id.

        The two observations are sent together, neither waiting for the other's answer, so the signer's group
        commit can share one fsync between them.  Their order in the run stays box, then task: the signer link
        writes calls on its one connection in the order they reach it (``gather`` starts them in order, and a
        call writes before its first wait), and the signer fixes each request's place in the log in the order
        it reads them.  Once both are answered, the first failure (in that order) is raised."""
        reply = await self.signer.call("register_run", request_id=new_request_id(),
                                       agent={"name": "tkbox", "version": "0.1.0"})
        self.run_id, self._token = reply["run_id"], reply["run_token"]
        answers = await asyncio.gather(
            self.signer.call("observe", request_id=new_request_id(), **self._run, source="tkbox.box",
                             trust="trusted", value=box_settings, must_keep=True),
            self.signer.call("observe", request_id=new_request_id(), **self._run, source="tkbox.task",
                             trust="trusted", value={"task": task}, must_keep=True),
            return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        self._must_keep_task = spawn(self._drain_must_keep(), name=f"must-keep-{self.box_id}")
        return self.run_id

    async def decide(self, tool: str, args: dict[str, Any]) -> Decision:
        """The signer's decision; an unreachable or failing signer is a refusal, never an allow."""
        if self.closed:
            return Decision("deny", "deny", None, ("TK-RUN-CLOSED",), "the box's run is closed; nothing more runs")
        self._begin()
        try:
            reply = await self.signer.call("decide", request_id=new_request_id(), **self._run, tool=tool, args=args)
        except SignerUnreachable as exc:
            self.on_event("signer.unavailable", {"door": tool, "reason": exc.message})
            return Decision("deny", "deny", None, (SIGNER_UNAVAILABLE_RULE,),
                            f"the signer did not answer ({exc.message}); nothing runs without a decision",
                            "start the signer with: tkbox signer up")
        except SignerCallError as exc:
            if exc.code == "unavailable":
                self.on_event("signer.unavailable", {"door": tool, "reason": exc.message})
            return Decision("deny", "deny", None, (f"TK-SIGNER-{exc.code.upper()}",),
                            f"the signer refused to decide: {exc.message}")
        finally:
            self._end()
        return Decision(reply["decision"], reply["verdict"], reply["decision_id"], tuple(reply["rule_ids"]),
                        reply["reason"], reply.get("hint"), bool(reply.get("incident")))

    async def complete(self, decision_id: str, *, status: str, exit_code: int | None, reported_by: str,
                       host: dict[str, Any], stdin: dict[str, Any] | None = None,
                       args_digest: str | None = None) -> None:
        """Record an exec's end. ``reported_by`` says whose word ``status`` and ``exit_code`` are (the guest's,
        or the host's when the guest never reported); ``host`` is what the host itself saw (its outcome, the
        time limit it kept, a reason)."""
        fields: dict[str, Any] = {"decision_id": decision_id, "status": status, "reported_by": reported_by,
                                  "host": host}
        if exit_code is not None:
            fields["exit_code"] = max(-255, min(255, exit_code))
        if stdin is not None:
            fields["stdin"] = stdin
        if args_digest is not None:
            fields["args_digest"] = args_digest
        await self._complete(decision_id, fields)

    async def complete_write(self, decision_id: str, *, ok: bool, error: str = "") -> None:
        """Record the end of a file write the changes door made itself (the host's word: no guest involved)."""
        fields: dict[str, Any] = {"decision_id": decision_id, "status": "ok" if ok else "error",
                                  "reported_by": "host"}
        if error:
            fields["error"] = error[:1024]
        await self._complete(decision_id, fields)

    async def complete_egress(self, decision_id: str, *, up: int, down: int, error: str = "") -> None:
        """Record the end of an egress connection: the bytes it carried each way, as the host's proxy counted them."""
        fields: dict[str, Any] = {"decision_id": decision_id, "status": "error" if error else "ok",
                                  "reported_by": "host", "output": {"bytes_up": up, "bytes_down": down}}
        if error:
            fields["error"] = error[:1024]
        await self._complete(decision_id, fields)

    def complete_soon(self, decision_id: str, **kwargs: Any) -> None:
        """Record a completion in the background; ``close`` waits for it (it is counted in flight from now)."""
        self._begin()
        spawn(self._complete_counted(decision_id, **kwargs), name=f"complete-{decision_id}")

    async def _complete_counted(self, decision_id: str, **kwargs: Any) -> None:
        try:
            await self.complete(decision_id, **kwargs)
        finally:
            self._end()

    async def _complete(self, decision_id: str, fields: dict[str, Any]) -> None:
        self._begin()
        try:
            await self.signer.call("complete", request_id=new_request_id(), **self._run, **fields)
        except SignerCallError as exc:
            self.gaps.add("complete")
            self.on_event("gap", {"kind": "complete", "decision_id": decision_id, "reason": exc.message,
                                  "count": self.gaps.counts["complete"]})
        finally:
            self._end()

    def _begin(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _end(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    def observe_must_keep(self, source: str, value: Any, trust: str = "untrusted") -> None:
        """Queue a must-keep observation; a full queue stops the box and is counted as a gap."""
        try:
            self._must_keep.put_nowait((source, trust, value))
        except asyncio.QueueFull:
            self.gaps.add("must_keep_queue_full")
            spawn(self._lose(source, "the must-keep queue is full"), name=f"gap-{self.box_id}")

    async def record_approval(self, *, approval_id: str, decision_id: str, answer: str, by: str, reason: str) -> None:
        """Record an answer to an ask decision (``tkbox.approval``) and wait until the signer has kept it: the action
        may use the answer only after this returns.  Not queued behind other must-keep records.  Raises
        ``SignerCallError`` when the signer refuses it or cannot be reached; stopping the box is the caller's."""
        if self.closed or self.run_id is None:
            raise SignerCallError("run_closed",
                                  f"box {self.box_id} has no open run to record approval {approval_id} in")
        value = {"approval_id": approval_id, "decision_id": decision_id, "answer": answer, "by": by, "reason": reason}
        await self.observe_kept("tkbox.approval", value)

    async def observe_kept(self, source: str, value: Any) -> None:
        """Record a trusted must-keep observation and wait until the signer has kept it (not queued behind other
        records): for what may take effect only once it is recorded.  Raises ``SignerCallError`` when the signer
        refuses it or cannot be reached, or the run is closed; the caller counts the loss with ``lose``."""
        if self.closed or self.run_id is None:
            raise SignerCallError("run_closed", f"box {self.box_id} has no open run to record {source} in")
        self._begin()
        try:
            await self.signer.call("observe", request_id=new_request_id(), **self._run, source=source,
                                   trust="trusted", value=value, must_keep=True)
        finally:
            self._end()

    async def lose(self, source: str, reason: str) -> None:
        """A must-keep record of ``source`` could not be kept: count it, record the loss and stop the box."""
        self.gaps.add("must_keep_refused")
        await self._lose(source, reason)

    async def _drain_must_keep(self) -> None:
        while True:
            source, trust, value = await self._must_keep.get()
            try:
                await self.signer.call("observe", request_id=new_request_id(), **self._run, source=source,
                                       trust=trust, value=value, must_keep=True)
            except SignerCallError as exc:
                self.gaps.add("must_keep_refused")
                await self._lose(source, exc.message)
            finally:
                self._must_keep.task_done()

    async def _lose(self, source: str, reason: str) -> None:
        self.on_event("gap", {"kind": "must_keep", "source": source, "reason": reason, "counts": self.gaps.counts})
        try:
            await self.signer.call("observe", request_id=new_request_id(), **self._run, source="tkbox.gap",
                                   trust="trusted", value={"lost": source, "reason": reason,
                                                           "counts": self.gaps.counts}, must_keep=True)
        except SignerCallError:
            try:
                await self.close(f"lost a must-keep record ({source}: {reason}) and could not record the loss",
                                 wait=False)
            except SignerCallError as exc:
                self.on_event("gap", {"kind": "close_run", "reason": exc.message})
        await self.stop_box(f"a must-keep record could not be kept ({source}: {reason})")

    async def containment(self) -> dict[str, Any]:
        return await self.signer.call("containment", **self._run)

    async def close_if_idle(self, reason: str, *, within: float) -> None:
        """Close the run once no decision, completion or record is in flight, waiting at most ``within`` seconds;
        past that, raise ``RunBusy`` and close nothing (an export must not close a run under a decision)."""
        if self.closed or self.run_id is None:
            return

        async def settled() -> None:
            await self._idle.wait()
            await self._must_keep.join()

        try:
            await asyncio.wait_for(settled(), within)
        except TimeoutError:
            raise RunBusy(f"{self._in_flight} call(s) to the signer and {self._must_keep.qsize()} record(s) "
                          f"were still in flight in run {self.run_id} after {within:g} s") from None
        await self.close(reason, wait=False)  # nothing in flight now, and nothing can start before the close is sent

    async def close(self, reason: str, *, wait: bool = True) -> None:
        """Close the run once every decision, completion and must-keep record in flight has been answered (waiting
        briefly); ``wait=False`` closes at once (the loss path, which runs inside the must-keep queue itself)."""
        if self.closed or self.run_id is None:
            return
        if wait:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), 10)
            if self._must_keep_task is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._must_keep.join(), 10)
        if self._must_keep_task is not None and self._must_keep_task is not asyncio.current_task():
            self._must_keep_task.cancel()
        if self.gaps.counts:
            with contextlib.suppress(SignerCallError):
                await self.signer.call("observe", request_id=new_request_id(), **self._run, source="tkbox.gap",
                                       trust="trusted", value={"counts": self.gaps.counts}, must_keep=True)
        try:
            await self.signer.call("close_run", request_id=new_request_id(), **self._run, reason=reason[:1024])
            self.closed = True
        except SignerCallError as exc:
            if exc.code == "run_closed":
                self.closed = True
            else:
                raise
