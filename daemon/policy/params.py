"""Parameter expansion: the value of $x / ${x...} when the normaliser knows it.

Handles assigned variables, positional parameters of ``sh -c '...' a b``, $IFS (a blank), and the
operators obfuscation uses: ``:-`` ``-`` ``:=`` ``=`` defaults, ``:+`` ``+``, ``${#x}``, case changes
``^^ ^ ,, ,``, substrings ``:off:len``, pattern removal ``# ## % %%`` and literal replacement ``/ //``.
None means "not known" (the caller keeps the text as written).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from .shellast import Param

WELL_KNOWN_ENV = re.compile(r"HOME|PWD|OLDPWD|USER|LOGNAME|PATH|SHELL|TMPDIR|HOSTNAME|LANG|TERM|UID|EUID|PPID|"
                            r"XDG_\w+|LC_\w+")


def expand_param(part: Param, variables: dict[str, str], positional: dict[str, str] | None) -> str | None:
    name, op = part.name, part.op
    if name == "IFS":
        return " "
    value: str | None
    if name in variables:
        value = variables[name]
    elif positional is not None and (name.isdigit() or name in "@*"):
        value = " ".join(positional[k] for k in sorted(positional, key=int) if k != "0") if name in "@*" \
            else positional.get(name, "")
    elif name in ("@", "*"):
        value = ""
    else:
        value = None
    if not op:
        return value
    if op[:2] in (":-", ":=") or op[:1] in ("-", "="):
        default = op[2:] if op[0] == ":" else op[1:]
        if value:
            return value
        if value is None and WELL_KNOWN_ENV.fullmatch(name):
            return None
        return default.strip("'\"")
    if value is None:
        return None
    if op[:2] == ":+" or op[:1] == "+":
        return (op[2:] if op[0] == ":" else op[1:]).strip("'\"") if value else ""
    if op.startswith("len"):
        return str(len(value))
    if op in ("^^", "^"):
        return value.upper() if op == "^^" else value[:1].upper() + value[1:]
    if op in (",,", ","):
        return value.lower() if op == ",," else value[:1].lower() + value[1:]
    m = re.fullmatch(r":\s*(-?\d+)(?::\s*(-?\d+))?", op)
    if m:
        start = int(m.group(1))
        start = max(0, len(value) + start) if start < 0 else start
        if m.group(2) is None:
            return value[start:]
        length = int(m.group(2))
        return value[start:start + length] if length >= 0 else value[start:len(value) + length]
    m = re.fullmatch(r"(##?|%%?)(.*)", op, re.S)
    if m and len(value) <= 4096:
        kind, pattern = m.groups()
        cuts = range(len(value) + 1)
        if kind[0] == "#":
            order = reversed(cuts) if kind == "##" else cuts
            return next((value[k:] for k in order if fnmatchcase(value[:k], pattern)), value)
        order = cuts if kind == "%%" else reversed(cuts)
        return next((value[:k] for k in order if fnmatchcase(value[k:], pattern)), value)
    m = re.fullmatch(r"(//?)([^/]*)/?(.*)", op, re.S)
    if m and not any(c in m.group(2) for c in "*?[") and m.group(2):
        count = -1 if m.group(1) == "//" else 1
        return value.replace(m.group(2), m.group(3), count)
    return None
