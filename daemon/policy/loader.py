"""load_pack: find a pack file, follow its ``extends``, substitute placeholders and compile it.

``load_pack("default")`` loads ``packs/default.yaml`` beside this module; a name with a slash or a
``.yaml``/``.yml`` suffix is a path. ``extends`` entries are pack names or paths relative to the
file that names them; a pack reached twice is loaded once, a cycle is an error.

Placeholders in ``pattern`` and ``unless`` (``{name}``; a literal brace is written ``\\{``):
``{cmd}`` the start of a command, ``{end}`` the end of a word, ``{signer_data_dir}``,
``{signer_runtime_dir}``, ``{signer_pid}``, ``{extra_protected_paths}`` from the PolicyContext
(``re.escape``d; a pid of None or no extra paths become ``(?!)``, a branch that never matches), and
any fragment named in a pack's ``patterns``.
"""

from __future__ import annotations

import re
from pathlib import Path

from .classes import build_classifier
from .context import PolicyContext, checked_context, default_context
from .errors import PolicyError
from .pack import REASON_FIELD, CompiledRule, PolicyPack
from .schema import RawPack, RawRule, check_document
from .yamlsource import parse_yaml

PACKS_DIR = Path(__file__).resolve().parent / "packs"
PACK_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
MAX_PACK_BYTES = 1 << 20
MAX_EXTENDS_DEPTH = 8
NEVER = "(?!)"

# The start of a command: the start of the text or just after a separator, then any blanks (not newlines:
# a newline is itself a separator, and letting each one swallow all that follow would be quadratic).
CMD_START = r"(?:^|[\n;&|(){}`])[ \t]*+"
# The end of a word: the end of the text, a blank, or a separator.
WORD_END = r"(?=$|[\s;&|()`])"
PLACEHOLDER_RE = re.compile(r"(?<!\\)\{([a-z][a-z0-9_]*)\}")


def builtin_pack_names() -> list[str]:
    return sorted(path.stem for path in PACKS_DIR.glob("*.yaml"))


def _resolve(name_or_path: str, relative_to: Path | None) -> tuple[str, Path]:
    """(pack name, file) for a built-in name or a path."""
    if PACK_NAME_RE.fullmatch(name_or_path):
        path = PACKS_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise PolicyError(f"no built-in pack named {name_or_path!r}",
                              action=f"use one of: {', '.join(builtin_pack_names())}, or a path to a .yaml file")
        return name_or_path, path
    path = Path(name_or_path).expanduser()
    if relative_to is not None and not path.is_absolute():
        path = relative_to.parent / path
    if not path.is_file():
        raise PolicyError(f"pack file {str(path)!r} does not exist",
                          action=f"give a path to a pack .yaml file, or a built-in pack name "
                                 f"({', '.join(builtin_pack_names())})")
    return path.stem, path


def _read(path: Path) -> RawPack:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise PolicyError(f"cannot read the pack: {error.strerror}", path=str(path),
                          action="check the path and its permissions") from None
    if len(data) > MAX_PACK_BYTES:
        raise PolicyError(f"the pack is {len(data)} bytes (at most {MAX_PACK_BYTES})", path=str(path),
                          action="split it into packs joined with extends")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PolicyError(f"not UTF-8 (byte {error.start})", path=str(path), action="save the file as UTF-8") from None
    return check_document(parse_yaml(text, str(path)))


def _collect(name: str, path: Path, chain: tuple[Path, ...], done: dict[Path, tuple[str, RawPack]],
             order: list[Path]) -> None:
    """Depth-first: a pack's parents before the pack itself, each file once."""
    real = path.resolve()
    if real in chain:
        cycle = " -> ".join(p.name for p in (*chain, real))
        raise PolicyError(f"extends makes a cycle ({cycle})", path=str(path),
                          action="remove one of the extends entries")
    if real in done:
        return
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise PolicyError(f"extends is nested more than {MAX_EXTENDS_DEPTH} deep", path=str(path),
                          action="flatten the chain of packs")
    raw = _read(path)
    for parent, line in raw.extends:
        try:
            parent_name, parent_path = _resolve(parent, path)
        except PolicyError as error:
            raise PolicyError(error.message, path=str(path), line=line, key="extends", action=error.action) from None
        _collect(parent_name, parent_path, (*chain, real), done, order)
    done[real] = (name, raw)
    order.append(real)


class _Substituter:
    """Expands ``{placeholder}``s in one pack chain's patterns."""

    def __init__(self, context: PolicyContext, fragments: dict[str, tuple[str, RawPack, int | None]]) -> None:
        pid = context.signer_pid
        extra = context.extra_protected_paths
        self.fixed = {
            "cmd": CMD_START,
            "end": WORD_END,
            "signer_data_dir": re.escape(context.signer_data_dir),
            "signer_runtime_dir": re.escape(context.signer_runtime_dir),
            "signer_pid": str(pid) if pid is not None else NEVER,
            "extra_protected_paths": "(?:" + "|".join(map(re.escape, extra)) + ")" if extra else NEVER,
        }
        self.fragments = fragments

    def expand(self, text: str, where: tuple[str, int | None, str], depth: int = 0) -> str:
        path, line, key = where

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in self.fixed:
                return self.fixed[name]
            if name in self.fragments:
                if depth >= 8:
                    raise PolicyError(f"placeholder {{{name}}} nests more than 8 deep (a cycle?)", path=path,
                                      line=line, key=key, action="make the patterns fragments not refer to each other in a loop")
                fragment, _pack, _line = self.fragments[name]
                return "(?:" + self.expand(fragment, where, depth + 1) + ")"
            known = sorted([*self.fixed, *self.fragments])
            raise PolicyError(f"unknown placeholder {{{name}}}", path=path, line=line, key=key,
                              action=f"use one of {', '.join('{' + k + '}' for k in known)}, "
                                     "or write a literal brace as \\{")

        return PLACEHOLDER_RE.sub(replace, text)


def _compile(rule: RawRule, pack_name: str, substituter: _Substituter) -> CompiledRule:
    def regex(key: str, source: str) -> tuple[str, re.Pattern[str]]:
        where = (rule.path, rule.key_lines.get(key, rule.line), f"{rule.verdict}.{rule.id}.{key}")
        expanded = substituter.expand(source, where)
        try:
            return expanded, re.compile(expanded)
        except re.error as error:
            raise PolicyError(f"bad regex ({error})", path=rule.path, line=where[1], key=where[2],
                              action="fix the regular expression (Python re syntax)") from None
        except (OverflowError, RecursionError, MemoryError):
            raise PolicyError("regex too large to compile", path=rule.path, line=where[1], key=where[2],
                              action="simplify the regular expression") from None

    pattern, pattern_re = regex("pattern", rule.pattern)
    unless, unless_re = regex("unless", rule.unless) if rule.unless is not None else (None, None)
    reason = rule.reason or f"matched policy rule {rule.id}"
    for name in REASON_FIELD.findall(reason):
        if name not in pattern_re.groupindex:
            raise PolicyError(f"the reason names {{{name}}}, which is not a named group of the pattern",
                              path=rule.path, line=rule.key_lines.get("reason", rule.line),
                              key=f"{rule.verdict}.{rule.id}.reason",
                              action=f"name a group (?P<{name}>...) in the pattern, or write a literal brace as \\{{")
    return CompiledRule(id=rule.id, verdict=rule.verdict, pattern=pattern, regex=pattern_re, unless=unless,
                        unless_regex=unless_re, classes=rule.classes, tools=rule.tools, field=rule.field,
                        reason=reason, hint=rule.hint, label=rule.label, pack=pack_name)


def load_pack(name_or_path: str = "default", context: PolicyContext | None = None) -> PolicyPack:
    """Load and compile a pack by built-in name or path; PolicyError (file, line, key) if anything is wrong."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise PolicyError(f"pack must be a name or path, got {name_or_path!r}",
                          action=f"use one of: {', '.join(builtin_pack_names())}, or a path")
    context = checked_context(context if context is not None else default_context())
    name, path = _resolve(name_or_path, None)
    done: dict[Path, tuple[str, RawPack]] = {}
    order: list[Path] = []
    _collect(name, path, (), done, order)
    chain = [done[real] for real in order]

    fragments: dict[str, tuple[str, RawPack, int | None]] = {}
    rules: list[tuple[RawRule, str]] = []
    first_seen: dict[str, RawRule] = {}
    unknown_tools = "ask"  # if no pack in the chain says otherwise
    for pack_name, raw in chain:
        for fragment_name, fragment, line in raw.patterns:
            fragments[fragment_name] = (fragment, raw, line)  # a derived pack may redefine a fragment
        for rule in raw.rules:
            if rule.id in first_seen:
                earlier = first_seen[rule.id]
                raise PolicyError(f"duplicate rule id {rule.id!r} (also at {earlier.path}:{earlier.line})",
                                  path=rule.path, line=rule.line, key=f"{rule.verdict}.id",
                                  action="give every rule in a pack and the packs it extends its own id")
            first_seen[rule.id] = rule
            rules.append((rule, pack_name))
        if raw.unknown_tools is not None:
            unknown_tools = raw.unknown_tools
    substituter = _Substituter(context, fragments)
    compiled = tuple(_compile(rule, pack_name, substituter) for rule, pack_name in rules)
    classifier = build_classifier([[(tool, cls) for tool, cls, _line in raw.tools] for _name, raw in chain])
    return PolicyPack(name=name, description=chain[-1][1].description, packs=tuple(n for n, _ in chain),
                      unknown_tools=unknown_tools, classifier=classifier, rules=compiled)
