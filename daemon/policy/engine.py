"""evaluate: decide one tool call against a compiled pack. Pure, no I/O, never raises.

Steps: classify the tool; check the arguments' shape (deny TK-ARGS-INVALID / TK-OVERSIZE); for an
unknown tool apply ``unknown_tools`` (TK-UNKNOWN-TOOL); work out the readings each rule's field is
matched against (a shell command's normalised readings, an fs call's paths, an http call's URL, or
the named argument); fire every rule whose pattern matches some reading that its ``unless`` does
not; an unparseable or unreadably complex command adds ask TK-SHELL-PARSE. The strictest verdict
wins (allow < flag < ask < deny); ``rule_ids`` lists every rule that fired, strictest first, then by id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from .args import canonical_json, check_args, path_readings
from .loader import CMD_START
from .normalise import normalise
from .pack import SEVERITY, CompiledRule, PolicyPack
from .schema import TOOL_CLASSES

DEFAULT_FIELD = {"shell": "command", "fs": "file_path", "http": "url", "mcp": "*", "unknown": "*"}
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P<[A-Za-z_]\w*>")
_BACKREFERENCE = ("\\1", "\\2", "\\3", "\\4", "\\5", "\\6", "\\7", "\\8", "\\9", "(?P=")


@dataclass(frozen=True)
class Verdict:
    """The decision for one call. ``findings`` has one {rule_id, verdict, reason} per rule that fired."""

    verdict: str
    rule_ids: tuple[str, ...]
    reason: str
    hint: str | None
    tool_class: str
    findings: tuple[dict, ...]


@dataclass(frozen=True)
class _Finding:
    rule_id: str
    verdict: str
    reason: str
    hint: str | None = None


def _split_branches(pattern: str) -> tuple[str, list[str]]:
    """(leading global flags like "m", the pattern's top-level alternatives)."""
    flags = ""
    m = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if m:
        flags, pattern = m.group(1), pattern[m.end():]
    branches, depth, start, i, n = [], 0, 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i += 1
            i += 1 if i < n and pattern[i] == "^" else 0
            i += 1 if i < n and pattern[i] == "]" else 0
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
        i += 1
    branches.append(pattern[start:])
    return flags, branches


def _compile_or(source: str) -> re.Pattern[str] | None:
    try:
        return re.compile(source)
    except (re.error, RecursionError, OverflowError):
        return None


class _RulePlan:
    """A rule split for screening: its command-start branches (screened together) and the rest."""

    def __init__(self, rule: CompiledRule) -> None:
        self.rule = rule
        self.cmd_branches: list[str] = []
        self.other: re.Pattern[str] | None = rule.regex
        if any(b in rule.pattern for b in _BACKREFERENCE):
            return  # group numbers would shift if split: always try the whole rule
        flags, branches = _split_branches(rule.pattern)
        cmd = [_NAMED_GROUP.sub("(?:", f"(?{flags}:{b[len(CMD_START):]})" if flags else b[len(CMD_START):])
               for b in branches if b.startswith(CMD_START)]  # unnamed: names may repeat across rules
        rest = [b for b in branches if not b.startswith(CMD_START)]
        other = _compile_or((f"(?{flags})" if flags else "") + "|".join(rest)) if rest else None
        if rest and other is None:
            return
        self.cmd_branches, self.other = cmd, other


class _Group:
    """Rules of one class that read the same field. Branches that start with {cmd} are screened by one
    combined regex; a rule is tried in full only if its other branches or that screen match.

    (The other branches stay one search per rule: each mostly starts with a literal that the regex engine
    scans for fast, and one alternation of them all measured slower than the separate searches.)"""

    def __init__(self, field: str, rules: list[CompiledRule]) -> None:
        self.field = field
        self.plans = [_RulePlan(rule) for rule in rules]
        branches = [b for plan in self.plans for b in plan.cmd_branches]
        self.cmd_screen = (_compile_or(f"{CMD_START}(?:" + "|".join(f"(?:{b})" for b in branches) + ")")
                           if branches else None)
        self.screen_failed = bool(branches) and self.cmd_screen is None
        # per rule, in order: (the rule, its other branches' search or None, whether the {cmd} screen covers it)
        self._screens = tuple((plan.rule, plan.other.search if plan.other is not None else None,
                               bool(plan.cmd_branches)) for plan in self.plans)

    def candidates(self, texts: tuple[str, ...]) -> list[CompiledRule]:
        cmd_hit = self.screen_failed or (self.cmd_screen is not None and _found_in(self.cmd_screen, texts))
        out = []
        if len(texts) == 1:  # the usual case: one reading, searched without a loop over texts
            text = texts[0]
            for rule, search, screened in self._screens:
                if (cmd_hit and screened) or (search is not None and search(text) is not None):
                    out.append(rule)
            return out
        for rule, search, screened in self._screens:
            if (cmd_hit and screened) or (search is not None and any(search(text) is not None for text in texts)):
                out.append(rule)
        return out


def _found_in(regex: re.Pattern[str], texts: tuple[str, ...]) -> bool:
    """Whether ``regex`` matches somewhere in any of ``texts`` (a loop: cheaper than any() over a generator)."""
    search = regex.search
    for text in texts:
        if search(text) is not None:
            return True
    return False


def _plan(pack: PolicyPack) -> dict[str, list[_Group]]:
    """Per class, its rules grouped by field (built once per pack)."""
    plan = pack.engine_cache.get("plan")
    if plan is None:
        plan = {}
        for tool_class in TOOL_CLASSES:
            by_field: dict[str, list[CompiledRule]] = {}
            for rule in pack.rules:
                if rule.classes is None or tool_class in rule.classes:
                    by_field.setdefault(rule.field or DEFAULT_FIELD[tool_class], []).append(rule)
            plan[tool_class] = [_Group(field, rules) for field, rules in by_field.items()]
        pack.engine_cache["plan"] = plan
    return plan


def _tool_matches(rule: CompiledRule, tool: str) -> bool:
    return rule.tools is None or any(tool == t or fnmatchcase(tool, t) for t in rule.tools)


class _Readings:
    """The texts each field is matched against, computed once per call."""

    def __init__(self, tool_class: str, tool: str, args: dict) -> None:
        self.tool_class, self.tool, self.args = tool_class, tool, args
        self.cache: dict[str, tuple[str, ...]] = {}
        self.shell_findings: list[_Finding] = []

    def of(self, field: str) -> tuple[str, ...]:
        if field not in self.cache:
            self.cache[field] = self._compute(field)
        return self.cache[field]

    def _compute(self, field: str) -> tuple[str, ...]:
        args = self.args
        if field == "*":
            return (canonical_json(args),)
        if self.tool_class == "shell" and field == "command":
            return self._shell()
        if self.tool_class == "fs" and field in ("file_path", "notebook_path", "path"):
            return path_readings(args, self.tool)
        if self.tool_class == "http" and field == "url" and "url" not in args:
            field = "query"
        value = args.get(field)
        if value is None:
            return ()
        return (value,) if isinstance(value, str) else (canonical_json(value),)

    def _shell(self) -> tuple[str, ...]:
        args = self.args
        read = normalise(args["command"], args.get("stdin_text"))
        readings = list(read.readings)
        if isinstance(args.get("cwd"), str) and args["cwd"]:
            readings.append(f"cd {args['cwd']}")  # the command runs there: as if it began with cd
        env = args.get("env")
        if isinstance(env, dict) and env:
            readings.append("; ".join(f"export {k}={v}" for k, v in env.items()))
        if read.parse_errors:
            self.shell_findings.append(_Finding("TK-SHELL-PARSE", "ask",
                                                f"the command cannot be parsed ({read.parse_errors[0]})",
                                                "balance the quotes and brackets"))
        elif not read.complete:
            self.shell_findings.append(_Finding("TK-SHELL-PARSE", "ask", "the command is too long, nested or "
                                                "obfuscated to read in full", "split it into simpler commands"))
        return tuple(readings)


def _fires(rule: CompiledRule, readings: tuple[str, ...]) -> re.Match[str] | None:
    """The first match of the rule in a reading its ``unless`` does not exempt; None if it does not fire."""
    for text in readings:
        match = rule.regex.search(text)
        if match and not (rule.unless_regex is not None and rule.unless_regex.search(text)):
            return match
    return None


def _verdict(tool_class: str, findings: list[_Finding]) -> Verdict:
    findings = sorted(findings, key=lambda f: (-SEVERITY[f.verdict], f.rule_id))
    if not findings:
        return Verdict("allow", (), "no rule matched", None, tool_class, ())
    top = findings[0].verdict
    hint = next((f.hint for f in findings if f.verdict == top and f.hint), None)
    return Verdict(verdict=top, rule_ids=tuple(dict.fromkeys(f.rule_id for f in findings)), reason=findings[0].reason,
                   hint=hint, tool_class=tool_class,
                   findings=tuple({"rule_id": f.rule_id, "verdict": f.verdict, "reason": f.reason} for f in findings))


def _deny(rule_id: str, reason: str, tool_class: str) -> Verdict:
    return _verdict(tool_class, [_Finding(rule_id, "deny", reason)])


def _evaluate(pack: PolicyPack, tool: object, args: object) -> Verdict:
    if not isinstance(tool, str) or not tool or len(tool) > 1024:
        return _deny("TK-ARGS-INVALID", "the tool name must be a non-empty string of at most 1024 characters",
                     "unknown")
    tool_class = pack.classifier.classify(tool)
    problem = check_args(tool_class, tool, args)
    if problem is not None:
        return _deny("TK-OVERSIZE" if problem.oversize else "TK-ARGS-INVALID", problem.reason, tool_class)
    findings: list[_Finding] = []
    if tool_class == "unknown" and pack.unknown_tools != "allow":
        findings.append(_Finding("TK-UNKNOWN-TOOL", pack.unknown_tools,
                                 f"tool {tool!r} is not in the pack's tool classes (unknown_tools: {pack.unknown_tools})"))
    readings = _Readings(tool_class, tool, args)
    if tool_class == "shell":
        readings.of("command")  # always read the command: a parse problem asks even with no shell rules
    for group in _plan(pack)[tool_class]:
        texts = readings.of(group.field)
        if not texts:
            continue
        for rule in group.candidates(texts):
            match = _fires(rule, texts) if _tool_matches(rule, tool) else None
            if match is not None:
                findings.append(_Finding(rule.id, rule.verdict, rule.explain(match), rule.hint))
    findings.extend(readings.shell_findings)
    return _verdict(tool_class, findings)


def evaluate(pack: PolicyPack, tool: str, args: dict) -> Verdict:
    """Decide one call. Bad arguments deny (TK-ARGS-INVALID / TK-OVERSIZE); any internal failure denies too."""
    try:
        return _evaluate(pack, tool, args)
    except Exception as error:  # noqa: BLE001 - fail closed: the signer must always get a verdict
        return _deny("TK-EVAL-ERROR", f"the policy engine failed ({type(error).__name__}); denied to be safe",
                     "unknown")
