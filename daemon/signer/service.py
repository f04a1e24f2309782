"""The signer's methods: validate, decide with policy, sign into the store, answer.

Each handler does all of its bookkeeping and fixes its record's place in the log
*before* its first ``await``, so requests are ordered exactly as they arrived even
though their fsyncs are shared (group commit).  Replies to state-changing calls are
kept per (caller, request_id): a retry gets the original answer, another payload
with the same id gets ``conflict``.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import strictjson
from ..evidence.approval_record import SOURCE as APPROVAL_SOURCE
from ..evidence.records import SIGNER_RUN_ID, Record, parse_record, public_raw
from ..evidence.trust import build_trust
from ..policy import PolicyPack, evaluate
from . import commitments, runtoken
from .approvals import ApprovalRefused, check_approval
from .exports import ExportRefused, RunExports
from .idempotency import ReplyWindow, RequestExpired
from .keys import SignerKeys
from .rpc_schema import RPC_VERSION, SchemaError, error, validate
from .state import RUN_INDEX_STRIDE, RunBook, RunState, method_of, reply_from_record
from .store import LogStore, StoreUnavailable

VERSION = "0.1.0"
RUN_TOKEN_TTL_SECONDS = 24 * 3600
MAX_OPEN_RUNS_PER_CALLER = 100
MAX_PENDING_DECISIONS_PER_RUN = 4096
INCIDENT_RULES = frozenset({"TK-D007", "TK-D013"})
CONTAINED_RULE = "TK-CONTAINED"

Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class RequestRefused(Exception):
    """Carries an error reply out of a handler."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.reply = error(code, message)


class SignerService:
    def __init__(
        self, keys: SignerKeys, store: LogStore, pack: PolicyPack, *, signer_uid: int | None = None,
        clock: Callable[[], float] = time.time, request_clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.store = store
        self.pack = pack
        self.book = RunBook(clock_ms=self._now_ms)
        self.signer_uid = os.getuid() if signer_uid is None else signer_uid
        self.clock = clock  # run tokens' expiry
        self.request_clock = request_clock  # the idempotency window's: the wall clock callers stamp request ids with
        self.recovery: dict[str, Any] = {}
        self.policy_digest = ""
        self._inflight: dict[bytes, tuple[str, str, asyncio.Future[dict[str, Any]]]] = {}
        self.exports = RunExports(store, keys)
        self._handlers: dict[str, Handler] = {
            "hello": self._hello,
            "status": self._status,
            "register_run": self._register_run,
            "decide": self._decide,
            "complete": self._complete,
            "observe": self._observe,
            "close_run": self._close_run,
            "hold": self._containment_change,
            "quarantine": self._containment_change,
            "release": self._containment_change,
            "containment": self._containment,
            "read": self._read,
            "checkpoint": self._checkpoint,
            "export_open": self._export_open,
            "export_read": self._export_read,
            "export_done": self._export_done,
            "trust": self._trust,
            "preview": self._preview,
        }

    # ---- start -------------------------------------------------------------------------
    async def start(self) -> None:
        """Replay the store, then sign the epoch (new log) and a start record."""
        self.exports.discard_all()  # left by a signer that died mid-export
        recovery = self.store.open(self.book.apply)
        self.recovery = {"records": recovery.records, "torn_bytes": recovery.torn_bytes, "torn_file": recovery.torn_file}
        if self.store.error:
            return
        try:
            self.policy_digest = self.store.save_policy(self.pack.snapshot())
        except OSError as exc:
            self.store.error = f"cannot write the policy snapshot: {exc.strerror}"
            return
        try:
            if self.store.size == 0:
                await self.store.append(SIGNER_RUN_ID, "signer.epoch", self._epoch_data())
            started: dict[str, Any] = {"pid": os.getpid(), "version": VERSION, "records": recovery.records}
            if recovery.torn_bytes:
                started["recovered"] = {"torn_bytes": recovery.torn_bytes, "torn_file": recovery.torn_file}
            await self.store.append(SIGNER_RUN_ID, "signer.started", started)
        except StoreUnavailable:
            return

    def _epoch_data(self) -> dict[str, Any]:


        public = base64.b64encode(public_raw(self.keys.record_key.public_key())).decode()
        return {
            "keys": [{"purpose": "record", "alg": "ed25519", "kid": self.keys.record_kid, "public_key": public}],
            "log_vkey": self.keys.log_vkey,
            "origin": self.keys.origin,
        }

    # ---- dispatch ----------------------------------------------------------------------
    async def handle(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request from ``identity`` (``uid:N``, taken from the socket)."""
        try:
            method, schema = validate(request)
        except SchemaError as exc:
            return error("invalid_request", str(exc))
        if not schema.state_changing:
            return await self._run_handler(method, identity, request)
        request_id = request["request_id"]
        key = ReplyWindow.key(identity, request_id)
        # the args' canonical bytes are inside both the request MAC and (for decide) the args commitment
        encoded = {"args": strictjson.canonical(request["args"])} if "args" in request else None
        mac = self._request_mac(request, encoded)
        pending = self._inflight.get(key)
        if pending is not None:  # the first one is still being answered: its record may not be durable yet
            first_method, first_mac, first_reply = pending
            reply = await asyncio.shield(first_reply)
            if first_method != method or first_mac != mac:
                return self._conflict(request_id)
            return dict(reply)
        seq = self.book.window.lookup(key)
        if seq is not None:
            return self._replay(seq, method, mac, request)
        try:
            self.book.window.check_new(request_id, self._now_ms())
        except RequestExpired as exc:
            return error("request_expired", str(exc))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = (method, mac, future)
        try:
            reply = await self._run_handler(method, identity, request, mac, encoded)
            future.set_result(reply)
            return reply
        finally:
            self._inflight.pop(key, None)

    async def _run_handler(self, method: str, identity: str, request: dict[str, Any], mac: str = "",
                           encoded: dict[str, bytes] | None = None) -> dict[str, Any]:
        request = {**request, "_mac": mac, "_encoded": encoded}
        try:
            return await self._handlers[method](identity, request)
        except RequestRefused as refused:
            return refused.reply
        except ExportRefused as refused:
            return error(refused.code, refused.message)
        except StoreUnavailable as exc:
            return error("unavailable", f"the signer's store cannot record ({exc}); nothing is allowed until it can")

    def _now_ms(self) -> int:
        return int(self.request_clock() * 1000)

    @staticmethod
    def _conflict(request_id: str) -> dict[str, Any]:
        return error("conflict", f"request_id {request_id!r} was used before with another request")

    def _replay(self, seq: int, method: str, mac: str, request: dict[str, Any]) -> dict[str, Any]:
        """The first answer to a retried request, rebuilt from the record it made (read back from the log)."""
        try:
            record = self.store.read_record(seq)
        except StoreUnavailable as exc:
            return error("unavailable", f"the signer's store cannot read back record {seq} ({exc})")
        if method_of(record) != method or record.event["data"].get("request_mac", "") != mac:
            return self._conflict(request["request_id"])
        reply = reply_from_record(record)
        if method == "register_run":
            owner = self.book.runs[reply["run_id"]].owner
            reply["run_token"] = self._mint(reply["run_id"], owner, reply["token_expires"])
        if method == "close_run":  # the record lacks it: any checkpoint now covers the closing record
            reply["checkpoint_size"], _ = self.store.checkpoint()
        return reply

    def _request_mac(self, request: dict[str, Any], encoded: dict[str, bytes] | None = None) -> str:
        body = {k: v for k, v in request.items() if k != "run_token"}
        return self.keys.salt_mac.digest(b"request:" + strictjson.canonical_object(body, encoded)).hex()[:32]

    def _mint(self, run_id: str, owner: str, expires: int) -> str:
        return runtoken.mint(self.keys.run_token_key, run_id, owner, expires)

    def _run_for(self, identity: str, request: dict[str, Any], *, open_only: bool = True) -> RunState:
        run = self.book.runs.get(request["run_id"])
        if run is None:
            raise RequestRefused("unknown_run", f"no run {request['run_id']!r} in this signer")
        token, now = request["run_token"], int(self.clock())
        checked = run.checked_token
        if checked is not None and checked[0] == token and checked[1] == identity:  # verified before: only expiry
            if checked[2] <= now:
                raise RequestRefused("run_token_invalid", runtoken.EXPIRED)
        else:
            try:
                expires = runtoken.check(self.keys.run_token_key, token, run.run_id, identity, now)
            except runtoken.RunTokenError as exc:
                raise RequestRefused("run_token_invalid", str(exc)) from None
            run.checked_token = (token, identity, expires)
        if open_only and run.closed:
            raise RequestRefused("run_closed", f"run {run.run_id!r} is closed; register a new run")
        return run

    def _ensure_writable(self) -> None:
        if self.store.error:
            raise StoreUnavailable(self.store.error)

    async def _record(self, run_id: str, kind: str, data: dict[str, Any], identity: str,
                      request: dict[str, Any]) -> Record:
        """Sign a record now and wait for it to be durable; state follows the record."""
        if request.get("_mac"):
            data = {**data, "request_mac": request["_mac"]}
        record, durable = self.store.submit(run_id, kind, data, identity=identity, request_id=request.get("request_id"))
        self.book.apply(record)
        await durable
        return record

    # ---- methods -----------------------------------------------------------------------
    async def _hello(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"proto": [RPC_VERSION, RPC_VERSION], "version": VERSION, "pid": os.getpid(), "identity": identity,
                "signer": "tkbox-signer"}

    async def _status(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        runs = self.book.runs.values()
        return {
            "rpc_version": RPC_VERSION,
            "version": VERSION,
            "pid": os.getpid(),
            "identity": identity,
            "signer_uid": self.signer_uid,
            "log_id": self.keys.log_id,
            "origin": self.keys.origin,
            "keys": {"record_kid": self.keys.record_kid, "log_vkey": self.keys.log_vkey},
            "policy": {"name": self.pack.name, "policy_hash": self.pack.policy_hash},
            "records": self.store.size,
            "runs": {"open": sum(1 for r in runs if not r.closed), "closed": sum(1 for r in runs if r.closed)},
            "store": {"state": "failed" if self.store.error else "ok", "error": self.store.error,
                      "recovered": self.recovery},
            "isolation": self._isolation(identity),
            "assurance": "dev",
        }

    def _isolation(self, identity: str) -> str:
        return "same-user" if identity in (f"uid:{self.signer_uid}", "uid:0") else "separate-user"

    async def _register_run(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        self._ensure_writable()
        run_id = request.get("run_id") or f"run-{secrets.token_hex(12)}"
        if run_id in self.book.runs or run_id == SIGNER_RUN_ID:
            raise RequestRefused("run_exists", f"run {run_id!r} already exists; choose another run_id or omit it")
        if self.book.open_runs_of(identity) >= MAX_OPEN_RUNS_PER_CALLER:
            raise RequestRefused(
                "quota_exceeded", f"{MAX_OPEN_RUNS_PER_CALLER} runs are open for {identity}; close one first"
            )
        expires = int(self.clock()) + RUN_TOKEN_TTL_SECONDS
        data = {
            "agent": request["agent"],
            "policy_name": self.pack.name,
            "policy_hash": self.pack.policy_hash,
            "signer_isolation": self._isolation(identity),
            "token_expires": expires,
        }
        record = await self._record(run_id, "run.registered", data, identity, request)
        reply = reply_from_record(record)
        reply["run_token"] = self._mint(run_id, identity, expires)
        return reply

    async def _decide(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        self._ensure_writable()
        run = self._run_for(identity, request)
        if run.pending_decisions >= MAX_PENDING_DECISIONS_PER_RUN:
            raise RequestRefused("quota_exceeded", "too many decisions without a completion in this run")
        tool, args = request["tool"], request["args"]
        verdict = evaluate(self.pack, tool, args)
        # its log seq in the id: once completed it leaves memory, and is found again on disk (_completed_verdict)
        decision_id = f"dec-{self.store.size:016x}{secrets.token_hex(8)}"
        data: dict[str, Any] = {
            "decision_id": decision_id,
            "tool": tool,
            "tool_class": verdict.tool_class,
            "verdict": verdict.verdict,
            "rule_ids": list(verdict.rule_ids),
            "reason": verdict.reason,
            "args": commitments.commit(self.keys.salt(decision_id), {"tool": tool, "args": args},
                                       request.get("_encoded")),
        }
        if run.containment != "active":
            data.update(verdict="deny", rule_ids=[CONTAINED_RULE, *data["rule_ids"]],
                        reason=f"run is {run.containment} by the operator"
                        + (f": {run.containment_reason}" if run.containment_reason else ""))
        if verdict.hint:
            data["hint"] = verdict.hint
        if "tool_call_id" in request:
            data["tool_call_id"] = request["tool_call_id"]
        if INCIDENT_RULES & set(data["rule_ids"]):
            data["incident"] = True
        record = await self._record(run.run_id, "policy.decision", data, identity, request)
        return reply_from_record(record)

    async def _complete(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run_for(identity, request, open_only=False)
        self._ensure_writable()
        decision_id = request["decision_id"]
        decision = run.pending.get(decision_id)
        if decision is None:
            if self._completed_verdict(run, decision_id) is not None:
                raise RequestRefused("decision_consumed", f"decision {decision_id} was completed already")
            raise RequestRefused("unknown_decision", f"no decision {decision_id} in run {run.run_id}")
        salt = self.keys.salt(decision_id)
        if "args_digest" in request and not hmac.compare_digest(
            commitments.commit_digest(salt, request["args_digest"]), decision.args_commitment
        ):
            raise RequestRefused("args_mismatch", "args_digest is not the digest of the decided tool and args")
        data: dict[str, Any] = {"decision_id": decision_id, "status": request["status"]}
        for name in ("exit_code", "stdin", "reported_by", "host"):
            if name in request:
                data[name] = request[name]
        if "output" in request:
            data["output"] = commitments.commit(self.keys.salt(f"result:{decision_id}"), request["output"])
        if "error" in request:
            data["error"] = commitments.commit(self.keys.salt(f"error:{decision_id}"), request["error"])
        record = await self._record(run.run_id, "tool.result", data, identity, request)
        approved = decision.verdict == "ask" and decision.answer == "approve"
        if decision.verdict in ("deny", "ask") and not approved:
            await self._record(run.run_id, "capture.gap",
                               {"kind": "executed_against_policy", "decision_id": decision_id}, "signer", {})
        return reply_from_record(record)

    async def _observe(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run_for(identity, request, open_only=True)
        self._ensure_writable()
        plain: dict[str, str] = {}
        if request["source"] == APPROVAL_SOURCE:  # an answer to an ask: checked, and which one kept in plain
            try:
                plain = check_approval(run, request["trust"], request["value"],
                                       lambda decision_id: self._completed_verdict(run, decision_id)).plain()
            except ApprovalRefused as refused:
                raise RequestRefused(refused.code, refused.message) from None
        salt_id = secrets.token_hex(16)
        data = {
            "source": request["source"],
            "trust": request["trust"],
            "must_keep": request.get("must_keep", False),
            "salt_id": salt_id,
            "output": commitments.commit(self.keys.salt(f"input.observed:{salt_id}"), request["value"]),
            **plain,
        }
        record = await self._record(run.run_id, "input.observed", data, identity, request)
        return reply_from_record(record)

    async def _close_run(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run_for(identity, request)
        self._ensure_writable()
        data = {"reason": request.get("reason", ""), "records": run.records + 1}
        record = await self._record(run.run_id, "run.closed", data, identity, request)
        await self.store.drain()
        size, _ = self.store.checkpoint()
        reply = reply_from_record(record)
        reply["checkpoint_size"] = size
        return reply

    async def _containment_change(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        method = request["method"]
        run = self.book.runs.get(request["run_id"])
        if run is None:
            raise RequestRefused("unknown_run", f"no run {request['run_id']!r} in this signer")
        if run.closed:
            raise RequestRefused("run_closed", f"run {run.run_id!r} is closed")
        self._ensure_writable()
        target = {"hold": "held", "quarantine": "quarantined", "release": "active"}[method]
        if run.containment == "quarantined" and method != "quarantine":
            raise RequestRefused("invalid_request", "a quarantined run cannot be held or released; remove its box")
        data = {"state": target, "reason": request.get("reason", ""), "method": method}
        record = await self._record(run.run_id, "containment.changed", data, identity, request)
        return reply_from_record(record)

    async def _containment(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        run = self.book.runs.get(request["run_id"])
        if run is None:
            raise RequestRefused("unknown_run", f"no run {request['run_id']!r} in this signer")
        if "run_token" in request:
            self._run_for(identity, request, open_only=False)
        return {"run_id": run.run_id, "state": run.containment, "reason": run.containment_reason,
                "closed": run.closed, "store": "failed" if self.store.error else "ok"}

    async def _read(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        run = self._run_for(identity, request, open_only=False)
        start = request.get("from_seq", 0)
        limit = request.get("limit", 100)
        await self.store.drain()
        records = self.run_records(run, start, min(limit, run.records - start))
        events = [{"run_seq": r.run_seq, "type": r.type, "hash": r.hash, "event": r.event} for r in records]
        return {"records": events, "next_seq": start + len(events)}

    def run_records(self, run: RunState, start: int = 0, count: int | None = None) -> list[Record]:
        """``count`` (default: all) durable records of ``run`` from its ``start``-th, read back from the log
        (scanning from the run's nearest index mark)."""
        records: list[Record] = []
        count = run.records - start if count is None else count
        if count <= 0:
            return records
        needle = strictjson.canonical(run.run_id)
        for _seq, line in self.store.durable_lines(run.seq_marks[start // RUN_INDEX_STRIDE]):
            if needle not in line:
                continue
            record = parse_record(line)
            if record.run_id == run.run_id and record.run_seq >= start:
                records.append(record)
                if len(records) == count:
                    break
        return records

    def _completed_verdict(self, run: RunState, decision_id: str) -> str | None:
        """The verdict of ``decision_id`` if it is a durable decision of ``run`` not pending any more (so completed),
        read back from the log (its seq is in the id); None if the run has no such decision."""
        seq = int(decision_id[4:20], 16)
        if decision_id in run.pending or seq >= self.store.durable_tree.size:
            return None
        record = self.store.read_record(seq)
        data = record.event["data"]
        if record.run_id != run.run_id or record.type != "policy.decision" or data["decision_id"] != decision_id:
            return None
        return str(data["verdict"])

    async def _preview(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        """The policy's verdict for ``tool`` and ``args``, recording nothing (a dry run shows it; the action
        itself is decided again, and recorded, with ``decide``)."""
        verdict = evaluate(self.pack, request["tool"], request["args"])
        reply: dict[str, Any] = {"tool": request["tool"], "tool_class": verdict.tool_class,
                                 "verdict": verdict.verdict, "rule_ids": list(verdict.rule_ids),
                                 "reason": verdict.reason, "recorded": False}
        if verdict.hint:
            reply["hint"] = verdict.hint
        return reply

    async def _export_open(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self.exports.open(identity, request["run_id"], self.book.runs.get(request["run_id"]))

    async def _export_read(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.exports.read(identity, request["export_id"], request["offset"])

    async def _export_done(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.exports.done(identity, request["export_id"])

    async def _trust(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        """The trust document pinning this signer's keys (public keys only), as ``tkbox signer trust`` writes it."""
        return {"trust": build_trust(record_key=self.keys.record_key.public_key(), log_vkey=self.keys.log_vkey)}

    async def _checkpoint(self, identity: str, request: dict[str, Any]) -> dict[str, Any]:
        self._ensure_writable()
        await self.store.drain()
        size, signed = self.store.checkpoint()
        return {"size": size, "note": signed.decode()}
