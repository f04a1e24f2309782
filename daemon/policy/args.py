"""Check a tool call's arguments against the shape of its class, and name what rules match against.

Shapes: shell ``{"command": str, "cwd"?: str, "env"?: {str: str}, "stdin_sha256"?: str,
"stdin_bytes"?: int, "stdin_text"?: str}``; fs ``{"file_path": str, ...}`` (``notebook_path`` for
NotebookEdit; Grep and Glob take ``pattern`` and an optional ``path``); http ``{"url": str}``
(WebSearch may give ``query`` instead); mcp and unknown tools any JSON object. Extra keys are
allowed; a missing or wrongly typed known key is an ArgsProblem (deny TK-ARGS-INVALID), anything too
big an ArgsProblem with ``oversize`` (deny TK-OVERSIZE). Never raises on any input.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass

MAX_COMMAND_BYTES = 1 << 20      # a shell command longer than this is refused (TK-OVERSIZE)
MAX_STRING_BYTES = 1 << 20       # likewise any one string in the arguments
MAX_TOTAL_CHARS = 4 << 20        # and all strings together
MAX_DEPTH = 32
MAX_NODES = 100_000

FS_PATH_KEYS = ("file_path", "notebook_path", "path")
_SEARCH_TOOLS = ("Grep", "Glob")


@dataclass(frozen=True)
class ArgsProblem:
    reason: str
    oversize: bool = False


def _utf8_len(text: str) -> int:
    return len(text) if len(text) * 4 <= MAX_STRING_BYTES else len(text.encode("utf-8", "surrogatepass"))


def _check_json(args: object) -> ArgsProblem | None:
    """Only JSON values (objects with string keys), bounded in depth, count and size."""
    stack: list[tuple[object, int]] = [(args, 0)]
    nodes = 0
    total = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            return ArgsProblem(f"arguments nest deeper than {MAX_DEPTH} or hold more than {MAX_NODES} values",
                               oversize=True)
        if isinstance(value, str):
            total += len(value)
            if total > MAX_TOTAL_CHARS or _utf8_len(value) > MAX_STRING_BYTES:
                return ArgsProblem("an argument string is larger than 1 MiB (or all together larger than 4 MiB)",
                                   oversize=True)
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return ArgsProblem(f"argument keys must be strings, got {json_type(key)}")
                total += len(key)
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, depth + 1) for item in value)
        elif value is None or isinstance(value, bool | int | float):
            continue
        else:
            return ArgsProblem(f"arguments must be JSON values, got {json_type(value)}")
    return None


def json_type(value: object) -> str:
    """``value``'s type as JSON names it (``null``, ``boolean``, ``number``, ``string``, ``array``, ``object``);
    a Python value with no JSON type by its Python name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return f"a Python {type(value).__name__}"


def _expect(args: dict, key: str, kind: type | tuple[type, ...], *, required: bool, what: str) -> ArgsProblem | None:
    if key not in args:
        return ArgsProblem(f"missing required argument {key!r} ({what})") if required else None
    value = args[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        return ArgsProblem(f"argument {key!r} must be {what}, got {json_type(value)}")
    return None


def check_args(tool_class: str, tool: str, args: object) -> ArgsProblem | None:
    """None if ``args`` has the shape of ``tool_class``; otherwise what is wrong."""
    if not isinstance(args, dict):
        return ArgsProblem(f"arguments must be a JSON object, got {json_type(args)}")
    problem = _check_json(args)
    if problem is not None:
        return problem
    if tool_class == "shell":
        problem = _expect(args, "command", str, required=True, what="a string")
        if problem is None and _utf8_len(args["command"]) > MAX_COMMAND_BYTES:
            return ArgsProblem("the command is larger than 1 MiB", oversize=True)
        if len(args) > 1:  # optional arguments present (most calls have only the command)
            for key, kind, what in (("cwd", str, "a string"), ("stdin_sha256", str, "a string"),
                                    ("stdin_bytes", int, "an integer"), ("stdin_text", str, "a string"),
                                    ("env", dict, "an object of strings")):
                problem = problem or _expect(args, key, kind, required=False, what=what)
        if problem is None and isinstance(args.get("env"), dict):
            if not all(isinstance(v, str) for v in args["env"].values()):
                return ArgsProblem("argument 'env' must map names to strings")
        if problem is None and isinstance(args.get("stdin_bytes"), int) and args["stdin_bytes"] < 0:
            return ArgsProblem("argument 'stdin_bytes' must not be negative")
        return problem
    if tool_class == "fs":
        if tool in _SEARCH_TOOLS:
            return (_expect(args, "pattern", str, required=True, what="a string")
                    or _expect(args, "path", str, required=False, what="a string"))
        present = [key for key in FS_PATH_KEYS if key in args]
        if not present:
            return ArgsProblem("missing required argument 'file_path' (a string)")
        for key in present:
            problem = _expect(args, key, str, required=True, what="a string")
            if problem is not None:
                return problem
        return None
    if tool_class == "http":
        if "url" not in args and "query" in args:
            return _expect(args, "query", str, required=True, what="a string")
        return _expect(args, "url", str, required=True, what="a string")
    return None


def canonical_json(value: object) -> str:
    """Compact, key-sorted JSON text of validated arguments (what ``field: "*"`` rules match)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def path_readings(args: dict, tool: str) -> tuple[str, ...]:
    """Each path an fs call names, as given and tidied (// /./ and .. resolved)."""
    keys = list(FS_PATH_KEYS) + (["pattern"] if tool == "Glob" else [])
    out: dict[str, None] = {}
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value:
            out[value] = None
            if "/" in value and len(value) <= 65536:
                tidy = posixpath.normpath(value)
                out["/" + tidy.lstrip("/") if tidy.startswith("//") else tidy] = None
    return tuple(out)
