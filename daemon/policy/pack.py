"""PolicyPack: a loaded, compiled pack, and its policy hash.

A pack compiles to a plain JSON-able snapshot (tool classes, ``unknown_tools`` and every rule with
its placeholders substituted); ``policy_hash`` is ``sha256:`` + SHA-256 of that snapshot as RFC 8785
canonical JSON, so any change to any rule, class or context path changes the hash, and the same
pack compiled with the same context always has the same hash.

A rule's reason may name the pattern's named groups as ``{name}``; ``CompiledRule.explain`` fills them
from the match that fired the rule, escaped (no control characters) and cut to MAX_REASON_FIELD characters.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass

import rfc8785

from .classes import ToolClassifier
from .escapes import escape_unprintable

SNAPSHOT_FORMAT = "tkbox.policy.v1"
# Verdict order: a stricter verdict has a higher severity.
SEVERITY = {"allow": 0, "flag": 1, "ask": 2, "deny": 3}
# {name} in a reason: a named group of the rule's pattern (a literal brace is written \{).
REASON_FIELD = re.compile(r"(?<!\\)\{([a-z][a-z0-9_]*)\}")
MAX_REASON_FIELD = 256


@dataclass(frozen=True)
class CompiledRule:
    """One rule ready to match: its regexes compiled, its scope resolved."""

    id: str
    verdict: str
    pattern: str                   # regex source after placeholder substitution
    regex: re.Pattern[str]
    unless: str | None
    unless_regex: re.Pattern[str] | None
    classes: tuple[str, ...] | None  # None: every class
    tools: tuple[str, ...] | None    # None: every tool (names or globs)
    field: str | None                # None: the class's default field
    reason: str
    hint: str | None
    label: str | None
    pack: str                        # name of the pack that defined it

    @property
    def severity(self) -> int:
        return SEVERITY[self.verdict]

    def explain(self, match: re.Match[str] | None) -> str:
        """The reason, its ``{name}`` fields filled from ``match`` (a group that took no part is "?")."""
        if "{" not in self.reason:
            return self.reason

        def fill(field: re.Match[str]) -> str:
            value = match.group(field.group(1)) if match is not None and field.group(1) in match.re.groupindex else None
            return "?" if value is None else escape_unprintable(value, MAX_REASON_FIELD)

        return REASON_FIELD.sub(fill, self.reason).replace("\\{", "{")

    def snapshot(self) -> dict:
        return {"id": self.id, "verdict": self.verdict, "pattern": self.pattern, "unless": self.unless,
                "class": list(self.classes) if self.classes is not None else None,
                "tool": list(self.tools) if self.tools is not None else None, "field": self.field,
                "reason": self.reason, "hint": self.hint, "label": self.label, "pack": self.pack}


class PolicyPack:
    """A compiled pack: what ``evaluate`` decides with. Treat as read-only."""

    def __init__(self, *, name: str, description: str | None, packs: tuple[str, ...], unknown_tools: str,
                 classifier: ToolClassifier, rules: tuple[CompiledRule, ...]) -> None:
        self.name = name
        self.description = description
        self.packs = packs
        self.unknown_tools = unknown_tools
        self.classifier = classifier
        self.rules = rules
        self._snapshot = {
            "format": SNAPSHOT_FORMAT,
            "name": name,
            "description": description,
            "packs": list(packs),
            "unknown_tools": unknown_tools,
            "tools": classifier.snapshot(),
            "rules": [rule.snapshot() for rule in rules],
        }
        digest = hashlib.sha256(rfc8785.dumps(self._snapshot)).hexdigest()
        self.policy_hash = f"sha256:{digest}"
        self.engine_cache: dict = {}  # per-pack structures the engine builds once (see engine.py)

    def snapshot(self) -> dict:
        """The compiled pack as JSON-able data: exactly what ``policy_hash`` is computed over."""
        return copy.deepcopy(self._snapshot)

    def __repr__(self) -> str:
        return f"PolicyPack(name={self.name!r}, rules={len(self.rules)}, policy_hash={self.policy_hash!r})"
