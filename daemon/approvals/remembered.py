"""One box's remembered rules ("approve and remember"): which later asks are approved without a person.

A rule is one (program, rule id) pair a person approved with ``remember``.  A later ``ask`` in the same box is
approved by the rules when its program is the same (argv[0], compared exactly) and EVERY rule id of its decision is
remembered for that program; an ask with no rule id is never approved this way.  The rules live as long as the
box's daemon does (memory only, like pending approvals) and are listed on the box (``BoxInfo.remembered``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable

from ..wire import RememberedRule

RULE_ID = re.compile(r"rem-[0-9a-f]{12}", re.ASCII)


def new_rule_id() -> str:
    return f"rem-{secrets.token_hex(6)}"


class RememberedRules:
    """The rules of one box, oldest first."""

    def __init__(self) -> None:
        self._rules: dict[str, RememberedRule] = {}

    def rules(self) -> list[RememberedRule]:
        return list(self._rules.values())

    def covering(self, program: str, rule_ids: Iterable[str]) -> list[RememberedRule]:
        """The rule for each of ``rule_ids`` under ``program`` when every one is remembered (one rule per rule
        id, in their order); an empty list when any is not, or when there are none."""
        wanted = list(dict.fromkeys(rule_ids))
        found = [self._find(program, rule_id) for rule_id in wanted]
        if not wanted or any(rule is None for rule in found):
            return []
        return [rule for rule in found if rule is not None]

    def _find(self, program: str, rule_id: str) -> RememberedRule | None:
        return next((rule for rule in self._rules.values() if rule.program == program and rule.rule_id == rule_id),
                    None)

    def add(self, *, program: str, rule_id: str, approval_id: str, by: str, created_at: str) -> RememberedRule | None:
        """Remember ``rule_id`` for ``program``; None when that pair is remembered already (nothing changes)."""
        if self._find(program, rule_id) is not None:
            return None
        rule = RememberedRule(id=new_rule_id(), program=program, rule_id=rule_id, approval_id=approval_id, by=by,
                              created_at=created_at)
        self._rules[rule.id] = rule
        return rule

    def remove(self, rule_id: str) -> RememberedRule | None:
        """Forget the rule with id ``rule_id`` (``rem-…``); None when there is no such rule."""
        return self._rules.pop(rule_id, None)
