"""One box's side of approvals: its asks, the records of their answers in its run, its remembered rules.

``BoxApprovals`` is the ``ApprovalHost`` of every approval of its box.  It records each answer through the box's
``RunRecorder.record_approval`` (which returns once the signer kept it); a refused record is counted in the run's
gaps, recorded as a ``tkbox.gap`` observation, and stops the box.  It keeps the box's remembered rules
(``remembered.py``): each one added or removed is recorded as a trusted must-keep ``tkbox.remembered_rule``
observation, and an ask they cover is approved without a person (``request``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..signer_link import SignerCallError
from ..tasks import spawn
from ..wire import ApprovalInfo, RememberedRule
from .registry import Approval, ApprovalRegistry, RecordRefused, iso_time
from .remembered import RememberedRules

if TYPE_CHECKING:
    from ..boxes.box import Box
    from ..boxes.recorder import Decision

APPROVAL_SOURCE = "tkbox.approval"
REMEMBERED_SOURCE = "tkbox.remembered_rule"
GAP_KIND = "approval_refused"  # the count of refused approval records in tkbox.gap
LIVE_STATES = ("running", "held")


class BoxApprovals:
    def __init__(self, box: Box, registry: ApprovalRegistry) -> None:
        self.box = box
        self.registry = registry
        self.remembered = RememberedRules()

    @property
    def id(self) -> str:
        return self.box.id

    @property
    def name(self) -> str:
        return self.box.settings.name

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        self.box.emit(kind, data)

    def pending_count(self) -> int:
        return self.registry.pending_count(self.box.id)

    # ---- asks ---------------------------------------------------------------------------------
    async def request(self, decision: Decision, *, asked: dict[str, Any], program: str,
                      context: dict[str, Any], kind: str = "exec") -> Approval:
        """An approval for an ``ask`` decision: answered at once when remembered rules cover it, else pending
        (raises ``LimitReached`` past the box's limits). ``kind``: ``exec`` (a command; ``program`` its argv[0])
        or ``write`` (a file of the box's patch; ``program`` is ``Write``)."""
        assert decision.decision_id is not None  # an ask is always the signer's, with its decision id
        fields = {"kind": kind, "asked": asked, "program": program, "decision_id": decision.decision_id,
                  "rule_ids": tuple(decision.rule_ids), "reason": decision.reason, "hint": decision.hint or "",
                  "context": context}
        rules = self.remembered.covering(program, decision.rule_ids)
        if rules:
            return await self.registry.approve_by_rule(self, rules, **fields)
        return self.registry.open(self, **fields)

    async def wait(self, approval: Approval) -> ApprovalInfo:
        """The approval once answered (the host's own deadline: ``ApprovalRegistry.wait``)."""
        return await self.registry.wait(approval)

    async def withdraw(self, approval: Approval, reason: str) -> None:
        """Its requester no longer waits: answered ``withdraw`` (recorded), unless answered already."""
        await self.registry.withdraw(approval, reason)

    async def withdraw_all(self, reason: str) -> None:
        """The box stops: each pending approval is answered ``withdraw`` (recorded) and its action refused."""
        await self.registry.withdraw_box(self.box.id, reason)

    # ---- the ApprovalHost side --------------------------------------------------------------------
    async def record(self, info: ApprovalInfo, answer: str, by: str, reason: str) -> None:
        recorder = self.box.recorder
        if recorder is None:  # an unrecorded daemon (--unrecorded) decides nothing, so nothing ever asks
            return
        try:
            await recorder.record_approval(approval_id=info.id, decision_id=info.decision_id, answer=answer,
                                           by=by[:256], reason=reason[:1024])
        except SignerCallError as exc:
            raise RecordRefused(exc.message) from None

    async def lose(self, reason: str) -> None:
        """Count the lost record, record the loss (``tkbox.gap``, must-keep) and stop the box if it is live."""
        recorder = self.box.recorder
        if recorder is None:
            return
        recorder.gaps.add(GAP_KIND)
        counts = dict(recorder.gaps.counts)
        self.box.emit("gap", {"kind": "must_keep", "source": APPROVAL_SOURCE, "reason": reason, "counts": counts})
        if not recorder.closed:
            recorder.observe_must_keep("tkbox.gap", {"lost": APPROVAL_SOURCE, "reason": reason, "counts": counts},
                                       trust="trusted")
        if self.box.state in LIVE_STATES:
            spawn(self.box.stop(f"a must-keep record could not be kept ({APPROVAL_SOURCE}: {reason})"),
                  name=f"box-stop-{self.box.id}")

    def remember(self, info: ApprovalInfo, by: str) -> None:
        for rule_id in info.rule_ids:
            rule = self.remembered.add(program=info.program, rule_id=rule_id, approval_id=info.id, by=by,
                                       created_at=iso_time(self.registry.now()))
            if rule is not None:
                self._record_rule("add", rule, by)
                self.emit("approval.rule_added", {"rule": rule.to_json()})

    # ---- remembered rules ---------------------------------------------------------------------------
    def forget(self, rule_id: str, *, by: str) -> RememberedRule | None:
        """Remove a remembered rule (recorded; event ``approval.rule_removed``); None when there is none."""
        rule = self.remembered.remove(rule_id)
        if rule is not None:
            self._record_rule("remove", rule, by)
            self.emit("approval.rule_removed", {"rule": rule.to_json()})
        return rule

    def _record_rule(self, action: str, rule: RememberedRule, by: str) -> None:
        recorder = self.box.recorder
        if recorder is not None and not recorder.closed:
            recorder.observe_must_keep(REMEMBERED_SOURCE, {"action": action, **rule.to_json(), "changed_by": by},
                                       trust="trusted")
