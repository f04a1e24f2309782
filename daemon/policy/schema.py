"""The pack file schema: check one parsed YAML document and turn it into a RawPack.

Strict: an unknown key, a wrong type, a missing required key, a bad value or a rule id used twice is
a PolicyError naming the file, the line and the key. Regexes are compiled later (``compile.py``),
after placeholders are substituted, but their errors name the same file and line.

Top-level keys: version (1, required), description, extends, tools, unknown_tools, patterns, and the
rule lists deny, ask, flag. Rule keys: id and pattern (required), class, tool, field, unless,
reason, hint, label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import PolicyError
from .yamlsource import KeyPath, YamlDocument

VERDICT_LISTS = ("deny", "ask", "flag")
UNKNOWN_TOOL_VERDICTS = ("allow", "flag", "ask", "deny")
TOOL_CLASSES = ("shell", "fs", "http", "mcp", "unknown")
TOP_LEVEL_KEYS = ("version", "description", "extends", "tools", "unknown_tools", "patterns") + VERDICT_LISTS
RULE_KEYS = ("id", "pattern", "class", "tool", "field", "unless", "reason", "hint", "label")

# Ids the engine itself gives; a pack may not reuse them.
ENGINE_RULE_IDS = frozenset({"TK-ARGS-INVALID", "TK-OVERSIZE", "TK-SHELL-PARSE",
                             "TK-UNKNOWN-TOOL", "TK-EVAL-ERROR"})
RULE_ID_RE = re.compile(r"[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+")
FIELD_RE = re.compile(r"\*|[A-Za-z_][A-Za-z0-9_]*")
PATTERN_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
MAX_TEXT = 4096  # longest reason / hint / description / label we accept


@dataclass(frozen=True)
class RawRule:
    """One rule as written, before placeholders are substituted and regexes compiled."""

    id: str
    verdict: str
    pattern: str
    classes: tuple[str, ...] | None
    tools: tuple[str, ...] | None
    field: str | None
    unless: str | None
    reason: str | None
    hint: str | None
    label: str | None
    path: str
    line: int | None
    key_lines: dict[str, int | None] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class RawPack:
    """One pack file as written (its ``extends`` not yet followed)."""

    path: str
    description: str | None
    extends: tuple[tuple[str, int | None], ...]
    tools: tuple[tuple[str, str, int | None], ...]
    unknown_tools: str | None
    patterns: tuple[tuple[str, str, int | None], ...]
    rules: tuple[RawRule, ...]


def _key_name(path: KeyPath) -> str:
    """deny[3].pattern style name of a key path."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class _Checker:
    """Type checks against one document, raising PolicyError with its file and line."""

    def __init__(self, document: YamlDocument) -> None:
        self.document = document

    def fail(self, path: KeyPath, message: str, action: str, *, at_value: bool = False) -> PolicyError:
        line = self.document.value_line_of(path) if at_value else self.document.line_of(path)
        return PolicyError(message, path=self.document.path, line=line, key=_key_name(path) or None, action=action)

    def mapping(self, value: object, path: KeyPath, allowed: tuple[str, ...], what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"{what} must be a mapping, got {_type_name(value)}",
                            f"write {what} as `key: value` lines", at_value=True)
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path + (str(key),), f"key {key!r} must be a string", "quote the key")
            if key not in allowed:
                raise self.fail(path + (key,), f"unknown key {key!r}",
                                f"use one of: {', '.join(allowed)} (check the spelling)")
        return value

    def string(self, value: object, path: KeyPath, *, limit: int = MAX_TEXT, empty_ok: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {_type_name(value)}", "quote the value", at_value=True)
        if not value and not empty_ok:
            raise self.fail(path, "must not be empty", "give a value or remove the key", at_value=True)
        if len(value) > limit:
            raise self.fail(path, f"is {len(value)} characters long (at most {limit})", "shorten it",
                            at_value=True)
        return value

    def names(self, value: object, path: KeyPath, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """A string or a list of strings (optionally each one of ``allowed``)."""
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            raise self.fail(path, f"must be a string or a non-empty list of strings, got {_type_name(value)}",
                            "write a name, or a YAML list of names", at_value=True)
        out = []
        for position, item in enumerate(items):
            item_path = path if isinstance(value, str) else path + (position,)
            text = self.string(item, item_path, limit=256)
            if allowed is not None and text not in allowed:
                raise self.fail(item_path, f"unknown value {text!r}", f"use one of: {', '.join(allowed)}",
                                at_value=True)
            out.append(text)
        return tuple(out)


def _type_name(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing (null)"}.get(type(value), type(value).__name__)


def check_document(document: YamlDocument) -> RawPack:
    """Validate a parsed pack document against the schema and return it as a RawPack."""
    check = _Checker(document)
    if document.data is None:
        raise PolicyError("the pack is empty", path=document.path, line=1,
                          action="start the file with `version: 1`")
    top = check.mapping(document.data, (), TOP_LEVEL_KEYS, "a pack")
    if "version" not in top:
        raise check.fail((), "missing required key 'version'", "add `version: 1` at the top")
    version = top["version"]
    if isinstance(version, bool) or version != 1:
        raise check.fail(("version",), f"unsupported version {version!r}", "use `version: 1`", at_value=True)
    description = check.string(top["description"], ("description",)) if "description" in top else None

    extends: list[tuple[str, int | None]] = []
    if "extends" in top:
        for position, name in enumerate(check.names(top["extends"], ("extends",))):
            item_path = ("extends",) if isinstance(top["extends"], str) else ("extends", position)
            extends.append((name, document.value_line_of(item_path)))

    tools: list[tuple[str, str, int | None]] = []
    if "tools" in top:
        mapping = top["tools"]
        if not isinstance(mapping, dict):
            raise check.fail(("tools",), f"must be a mapping of tool name (or glob) to class, got "
                             f"{_type_name(mapping)}", "write `Bash: shell` lines", at_value=True)
        for name, tool_class in mapping.items():
            if not isinstance(name, str) or not name:
                raise check.fail(("tools", str(name)), f"tool name {name!r} must be a non-empty string",
                                 "quote the tool name")
            check.names(tool_class, ("tools", name), TOOL_CLASSES)
            if not isinstance(tool_class, str):
                raise check.fail(("tools", name), "a tool has exactly one class", "give one class name",
                                 at_value=True)
            tools.append((name, tool_class, document.line_of(("tools", name))))

    unknown_tools = None
    if "unknown_tools" in top:
        unknown_tools = check.names(top["unknown_tools"], ("unknown_tools",), UNKNOWN_TOOL_VERDICTS)[0]
        if not isinstance(top["unknown_tools"], str):
            raise check.fail(("unknown_tools",), "must be one verdict", "write e.g. `unknown_tools: flag`",
                             at_value=True)

    patterns: list[tuple[str, str, int | None]] = []
    if "patterns" in top:
        mapping = top["patterns"]
        if not isinstance(mapping, dict):
            raise check.fail(("patterns",), f"must be a mapping of name to regex fragment, got "
                             f"{_type_name(mapping)}", "write `name: 'regex'` lines", at_value=True)
        for name, fragment in mapping.items():
            if not isinstance(name, str) or not PATTERN_NAME_RE.fullmatch(name):
                raise check.fail(("patterns", str(name)), f"bad fragment name {name!r}",
                                 "use lower-case letters, digits and _ (starting with a letter)")
            patterns.append((name, check.string(fragment, ("patterns", name), limit=65536),
                             document.line_of(("patterns", name))))

    rules: list[RawRule] = []
    seen_ids: dict[str, int | None] = {}
    for verdict in VERDICT_LISTS:
        if verdict not in top:
            continue
        entries = top[verdict]
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise check.fail((verdict,), f"must be a list of rules, got {_type_name(entries)}",
                             "write each rule as a `- id: ...` item", at_value=True)
        for position, entry in enumerate(entries):
            rule = _check_rule(check, entry, (verdict, position), verdict)
            if rule.id in seen_ids:
                raise check.fail((verdict, position, "id"), f"duplicate rule id {rule.id!r} (first at line "
                                 f"{seen_ids[rule.id]})", "give every rule its own id")
            seen_ids[rule.id] = rule.line
            rules.append(rule)
    return RawPack(path=document.path, description=description, extends=tuple(extends), tools=tuple(tools),
                   unknown_tools=unknown_tools, patterns=tuple(patterns), rules=tuple(rules))


def _check_rule(check: _Checker, entry: object, path: KeyPath, verdict: str) -> RawRule:
    rule = check.mapping(entry, path, RULE_KEYS, "a rule")
    for required in ("id", "pattern"):
        if required not in rule:
            raise check.fail(path, f"rule is missing required key {required!r}",
                             f"add `{required}:` to the rule", at_value=True)
    rule_id = check.string(rule["id"], path + ("id",), limit=64)
    if not RULE_ID_RE.fullmatch(rule_id):
        raise check.fail(path + ("id",), f"bad rule id {rule_id!r}",
                         "use upper-case words joined by dashes, like TK-D007", at_value=True)
    if rule_id in ENGINE_RULE_IDS:
        raise check.fail(path + ("id",), f"rule id {rule_id!r} is reserved for the engine",
                         "choose another id", at_value=True)
    pattern = check.string(rule["pattern"], path + ("pattern",), limit=65536)
    classes = check.names(rule["class"], path + ("class",), TOOL_CLASSES) if "class" in rule else None
    tools = check.names(rule["tool"], path + ("tool",)) if "tool" in rule else None
    field_name = None
    if "field" in rule:
        field_name = check.string(rule["field"], path + ("field",), limit=128)
        if not FIELD_RE.fullmatch(field_name):
            raise check.fail(path + ("field",), f"bad field name {field_name!r}",
                             "name one argument field (like command or file_path), or * for all arguments",
                             at_value=True)
    optional = {key: (check.string(rule[key], path + (key,), limit=65536 if key == "unless" else MAX_TEXT)
                      if key in rule else None) for key in ("unless", "reason", "hint", "label")}
    key_lines = {key: check.document.line_of(path + (key,)) for key in rule}
    return RawRule(id=rule_id, verdict=verdict, pattern=pattern, classes=classes, tools=tools, field=field_name,
                   unless=optional["unless"], reason=optional["reason"], hint=optional["hint"],
                   label=optional["label"], path=check.document.path, line=check.document.line_of(path + ("id",)),
                   key_lines=key_lines)
