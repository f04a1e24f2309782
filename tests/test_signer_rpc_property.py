"""Properties of the signer's RPC over sequences of requests, most of them well formed (``signer_rpc_steps``):

- every request gets one reply, a result or a known error, and the error is the one the request must get;
- a refused request adds no record;
- an accepted one adds exactly the records its method adds, in order, carrying the fields it sent (as salted
  commitments where the signer does not keep the value);
- a retry gets the first answer and adds nothing;
- a closed run exports as a bundle that verifies offline and holds exactly the records made for that run.

The requests are mostly accepted; the test counts the outcomes and fails if too few reach the signer's decisions.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bundle_records import record_lines
from tests.signer_rpc_steps import ACCEPT, ANY, Model, ModelDecision, ModelRun, Step, draw_step
from tkbox_daemon import strictjson
from tkbox_daemon.evidence.trust import parse_trust_document
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.policy import PolicyContext, PolicyPack, evaluate, load_pack
from tkbox_daemon.signer import commitments
from tkbox_daemon.signer.keys import SignerKeys, load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.rpc_schema import ERROR_CODES, METHODS
from tkbox_daemon.signer.service import CONTAINED_RULE, INCIDENT_RULES, SignerService
from tkbox_daemon.signer.store import LogStore

OWNER, STRANGER = "uid:0", "uid:4242"
HEX32 = re.compile(r"[0-9a-f]{32}")
# The records each accepted method adds, in order (a completion of a deny or ask decision also adds a capture gap).
RECORDS_OF = {"register_run": ["run.registered"], "decide": ["policy.decision"], "complete": ["tool.result"],
              "observe": ["input.observed"], "close_run": ["run.closed"], "hold": ["containment.changed"],
              "quarantine": ["containment.changed"], "release": ["containment.changed"]}
CONTAINMENT_TARGET = {"hold": "held", "quarantine": "quarantined", "release": "active"}


class SignerUnderTest:
    """A real signer service (real keys, store and policy) in ``base``, driven request by request on ``loop``."""

    def __init__(self, base: Path, loop: asyncio.AbstractEventLoop, keys: SignerKeys, pack: PolicyPack) -> None:
        paths = SignerPaths(base / "data", base / "run")
        paths.ensure()
        self.loop, self.keys, self.pack = loop, keys, pack
        self.store = LogStore(paths.store_dir, keys, durable=False)
        self.service = SignerService(self.keys, self.store, pack)
        self.loop.run_until_complete(self.service.start())
        self.bundles = base / "bundles"
        self.bundles.mkdir()

    def call(self, identity: str, request: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The reply to ``request`` and the events of the records it added."""
        before = self.store.size
        reply = self.loop.run_until_complete(self.service.handle(identity, request))
        return reply, [self.store.read_record(seq).event for seq in range(before, self.store.size)]


@pytest.fixture(scope="module")
def make_signer(tmp_path_factory):
    """Starts a fresh signer for each example (so an example's outcome depends on its draws alone); the keys and
    the policy are made once."""
    base = tmp_path_factory.mktemp("signer-rpc-property")
    loop = asyncio.new_event_loop()
    keys_dir = base / "keys"
    keys_dir.mkdir(mode=0o700)
    keys = load_or_create(keys_dir)
    pack = load_pack("default", PolicyContext(str(base / "data"), str(base / "run"), os.getpid()))

    @contextmanager
    def make() -> Iterator[SignerUnderTest]:
        signer = SignerUnderTest(Path(tempfile.mkdtemp(dir=base)), loop, keys, pack)  # removed with the test's dirs
        try:
            yield signer
        finally:
            signer.store.close()

    yield make
    loop.close()


def test_requests_get_their_outcome_and_accepted_ones_record_what_they_sent(make_signer):
    outcomes: Counter[tuple[str, str]] = Counter()

    @given(data=st.data(), steps=st.integers(1, 14))
    def property_holds(data, steps):
        model = Model(OWNER, STRANGER)
        with make_signer() as signer:
            for _ in range(steps):
                step = draw_step(data, model)
                outcomes[(step.kind, _send(signer, model, step))] += 1
            for run in model.open_runs():  # every run ends closed, so every run's export is verified
                close = {"method": "close_run", "request_id": model.request_id(), **run.fields()}
                outcomes[("close", _send(signer, model, Step("close", close, ACCEPT, OWNER, run)))] += 1

    property_holds()
    accepted = {kind: outcomes[(kind, "accepted")] for kind in ("register", "decide", "complete", "observe",
                                                               "close", "containment", "retry")}
    total = sum(outcomes.values())
    assert sum(accepted.values()) >= total // 2, outcomes  # most requests reach a decision and a record
    named = ("register", "decide", "complete", "observe", "close")
    assert min(accepted[kind] for kind in named) >= 3, outcomes  # each of them, not only the easy ones
    refused_after_the_schema = sum(n for (kind, outcome), n in outcomes.items()
                                   if kind in ("refused", "conflict") and outcome != "invalid_request")
    assert refused_after_the_schema >= total // 40, outcomes  # refusals that a well-formed request can get
    assert outcomes[("malformed", "invalid_request")] >= 1, outcomes


def _send(signer: SignerUnderTest, model: Model, step: Step) -> str:
    """Send one step, check its reply and records against the model, update the model; returns the outcome."""
    reply, events = signer.call(step.identity, step.request)
    assert isinstance(reply, dict)
    strictjson.canonical(reply)  # the reply is always encodable JSON
    if "error" in reply:
        code = reply["error"]["code"]
        assert code in ERROR_CODES and reply["error"]["message"]
        assert events == [], (step.request, reply)  # a refusal records nothing
        assert step.expect in (code, ANY), (step.kind, step.request, reply)
        return code
    assert step.expect in (ACCEPT, ANY), (step.kind, step.request, reply)
    method = step.request["method"]
    assert method in METHODS
    if step.kind == "retry":
        first = _accepted_reply(model, step.request)
        if method == "close_run":  # a retry gets a checkpoint size that still covers the closing record
            assert reply["checkpoint_size"] >= first["checkpoint_size"]
            first = {**first, "checkpoint_size": reply["checkpoint_size"]}
        assert events == [] and reply == first, (step.request, reply)
        return "accepted"
    if step.kind == "arbitrary":
        assert [e["type"] for e in events] in (RECORDS_OF.get(method, []), ["tool.result", "capture.gap"])
        if method == "register_run":
            model.known_run_ids.add(reply["run_id"])
        return "accepted"
    run = _check_recorded(signer, model, step, reply, events)
    model.accepted.append((step.request, reply))
    if method == "close_run":
        _check_export_verifies(signer, run)
    return "accepted"


def _accepted_reply(model: Model, request: dict[str, Any]) -> dict[str, Any]:
    return next(reply for sent, reply in model.accepted if sent == request)


def _check_recorded(signer: SignerUnderTest, model: Model, step: Step, reply: dict[str, Any],
                    events: list[dict[str, Any]]) -> ModelRun:
    request, method = step.request, step.request["method"]
    if method == "register_run":
        run = ModelRun(reply["run_id"], reply["run_token"])
        assert run.run_id == request.get("run_id", run.run_id) and run.run_id not in model.known_run_ids
        model.runs.append(run)
        model.known_run_ids.add(run.run_id)
    else:
        assert step.run is not None
        run = step.run
    first, gaps = events[0], events[1:]
    assert [e["type"] for e in events[:1]] == RECORDS_OF[method], events
    assert first["run_id"] == run.run_id and first["identity"] == OWNER
    assert first["request_id"] == request["request_id"] and HEX32.fullmatch(first["data"]["request_mac"])
    assert first["run_seq"] == len(run.events) and reply["run_seq"] == first["run_seq"]
    data = {k: v for k, v in first["data"].items() if k != "request_mac"}
    salt = signer.keys.salt
    if method == "register_run":
        assert data == {"agent": request["agent"], "policy_name": signer.pack.name,
                        "policy_hash": signer.pack.policy_hash, "signer_isolation": "same-user",
                        "token_expires": reply["token_expires"]}
    elif method == "decide":
        _check_decision(signer, run, request, reply, data)
    elif method == "complete":
        decision = run.decisions[request["decision_id"]]
        expected: dict[str, Any] = {"decision_id": request["decision_id"], "status": request["status"]}
        expected |= {name: request[name] for name in ("exit_code", "stdin", "reported_by", "host") if name in request}
        if "output" in request:
            expected["output"] = commitments.commit(salt(f"result:{request['decision_id']}"), request["output"])
        if "error" in request:
            expected["error"] = commitments.commit(salt(f"error:{request['decision_id']}"), request["error"])
        assert data == expected
        against_policy = decision.verdict in ("deny", "ask")  # no approval is ever recorded here
        assert [(g["type"], g["identity"], g["data"]) for g in gaps] == [
            ("capture.gap", "signer", {"kind": "executed_against_policy", "decision_id": request["decision_id"]})
        ] * against_policy
        decision.consumed = True
    elif method == "observe":
        assert HEX32.fullmatch(data["salt_id"])
        assert data == {"source": request["source"], "trust": request["trust"],
                        "must_keep": request.get("must_keep", False), "salt_id": data["salt_id"],
                        "output": commitments.commit(salt(f"input.observed:{data['salt_id']}"), request["value"])}
    elif method == "close_run":
        assert data == {"reason": request.get("reason", ""), "records": len(run.events) + 1}
        run.closed = True
    else:
        target = CONTAINMENT_TARGET[method]
        assert data == {"state": target, "reason": request.get("reason", ""), "method": method}
        assert reply == {"run_id": run.run_id, "state": target, "run_seq": first["run_seq"]}
        run.containment, run.containment_reason = target, request.get("reason", "")
    if method != "complete":
        assert gaps == []
    run.events.extend(e for e in events if e["run_id"] == run.run_id)
    return run


def _check_decision(signer: SignerUnderTest, run: ModelRun, request: dict[str, Any], reply: dict[str, Any],
                    data: dict[str, Any]) -> None:
    tool, args = request["tool"], request["args"]
    decision_id = data["decision_id"]
    assert re.fullmatch(r"dec-[0-9a-f]{32}", decision_id) and decision_id not in run.decisions
    assert data["tool"] == tool and data.get("tool_call_id") == request.get("tool_call_id")
    assert data["args"] == commitments.commit(signer.keys.salt(decision_id), {"tool": tool, "args": args})
    verdict = evaluate(signer.pack, tool, args)
    rule_ids, reason = list(verdict.rule_ids), verdict.reason
    if run.containment != "active":  # a held or quarantined run: every decision is a denial that says why
        assert data["verdict"] == "deny" and data["rule_ids"] == [CONTAINED_RULE, *rule_ids]
        assert data["reason"] == f"run is {run.containment} by the operator" + (
            f": {run.containment_reason}" if run.containment_reason else "")
    else:
        assert (data["verdict"], data["rule_ids"], data["reason"]) == (verdict.verdict, rule_ids, reason)
    assert data["tool_class"] == verdict.tool_class and data.get("hint") == (verdict.hint or None)
    assert data.get("incident", False) == bool(INCIDENT_RULES & set(data["rule_ids"]))
    assert (reply["decision_id"], reply["verdict"], reply["rule_ids"]) == (decision_id, data["verdict"],
                                                                          data["rule_ids"])
    assert reply["decision"] == {"flag": "allow"}.get(data["verdict"], data["verdict"])
    run.decisions[decision_id] = ModelDecision(tool, args, data["verdict"])


def _check_export_verifies(signer: SignerUnderTest, run: ModelRun) -> None:
    """The closed run exports (through the RPC, as its owner) as a bundle that verifies and holds its records."""
    opened, events = signer.call(OWNER, {"method": "export_open", "run_id": run.run_id})
    assert "error" not in opened and events == [], opened
    chunks, offset = [], 0
    while True:
        read, _ = signer.call(OWNER, {"method": "export_read", "export_id": opened["export_id"], "offset": offset})
        chunk = base64.b64decode(read["data"])
        chunks.append(chunk)
        offset += len(chunk)
        if read["eof"]:
            break
    signer.call(OWNER, {"method": "export_done", "export_id": opened["export_id"]})
    path = signer.bundles / f"{run.run_id.replace(':', '_')}.tkb"
    path.write_bytes(b"".join(chunks))
    trust, _ = signer.call(OWNER, {"method": "trust"})
    report = verify_bundle(path, parse_trust_document(trust["trust"]))
    assert report.integrity == "VERIFIED" and report.exit_code == 0, report.render_text()
    lines = record_lines(path)
    assert [strictjson.loads_object(line, max_bytes=1 << 20)["event"] for line in lines] == run.events
    path.unlink()


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_any_line_is_a_strict_object_or_a_clean_refusal(line):
    try:
        value = strictjson.loads_object(line, max_bytes=1 << 20)
    except strictjson.StrictJSONError as exc:
        assert str(exc)
    else:
        assert isinstance(value, dict)
        assert strictjson.loads_object(strictjson.canonical(value), max_bytes=1 << 20) == value
