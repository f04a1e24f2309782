"""The per-op schemas of the agent channel: requests the host sends, responses and exits the guest sends, and the
guest's boot message.  Each ``validate_*`` returns the object or raises :class:`ProtocolError` naming the field.
"""

from __future__ import annotations

import re
from typing import Any

from .frames import MAX_PAYLOAD, MAX_U32, ProtocolError
from .strict_json import MAX_SAFE_INTEGER

OPS = ("exec", "signal", "resize", "diff", "files", "shutdown", "ping")
MAX_WINSIZE = 1000  # rows and columns of a pty, each 1..MAX_WINSIZE
DEFAULT_WINSIZE = (24, 80)  # rows, cols of a pty exec that gives none
ALLOWED_SIGNALS = frozenset({1, 2, 9, 15})  # SIGHUP, SIGINT, SIGKILL, SIGTERM
CHANGES = ("added", "modified", "deleted", "mode")
GIT_MODES = ("100644", "100755", "120000")
MAX_FILES_READ = 64 << 20
# An exec the guest could not start in its working directory answers CWD_ + the errno name (else the errno name
# of the program's failure): the host tells "not found" (127) from "cannot run there" (126) by it.
EXEC_CWD_ERROR_PREFIX = "CWD_"
BOOT_PATH_DEFAULTS = {  # optional paths of the boot config, and where they are in a box when it names none
    "base_dir": "/run/tkbox/base",
    "upper_dir": "/run/tkbox/upper",
    "egress_socket": "/run/tkbox/egress.sock",
}

_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def _keys(obj: dict[str, Any], required: set[str], optional: set[str], what: str) -> None:
    missing = required - obj.keys()
    if missing:
        raise ProtocolError(f"{what}: missing {sorted(missing)}")
    extra = obj.keys() - required - optional
    if extra:
        raise ProtocolError(f"{what}: unknown keys {sorted(extra)[:8]}")


def _int(obj: dict[str, Any], key: str, low: int, high: int, what: str) -> int:
    value = obj[key]
    if type(value) is not int or not low <= value <= high:
        raise ProtocolError(f"{what}: {key} must be an integer in {low}..{high}")
    return value


def _bool(obj: dict[str, Any], key: str, what: str) -> bool:
    if type(obj[key]) is not bool:
        raise ProtocolError(f"{what}: {key} must be a boolean")
    return obj[key]


def _text(value: Any, what: str, *, max_bytes: int, allow_empty: bool = False, nul: bool = False) -> str:
    if type(value) is not str:
        raise ProtocolError(f"{what} must be a string")
    if not value and not allow_empty:
        raise ProtocolError(f"{what} must not be empty")
    if not nul and "\x00" in value:
        raise ProtocolError(f"{what} must not contain NUL")
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ProtocolError(f"{what} exceeds {max_bytes} bytes")
    return value


def _env(value: Any, what: str) -> dict[str, str]:
    if type(value) is not dict:
        raise ProtocolError(f"{what} must be an object")
    if len(value) > 4096:
        raise ProtocolError(f"{what} has more than 4096 variables")
    for key, item in value.items():
        _text(key, f"{what} name", max_bytes=4096)
        if "=" in key:
            raise ProtocolError(f"{what} name {key[:64]!r} contains '='")
        _text(item, f"{what} value", max_bytes=MAX_PAYLOAD, allow_empty=True)
    return value


def _id_of(obj: Any, what: str) -> int:
    if type(obj) is not dict:
        raise ProtocolError(f"{what} must be an object")
    if "id" not in obj:
        raise ProtocolError(f"{what}: missing id")
    return _int(obj, "id", 0, MAX_U32, what)


def validate_request(obj: Any) -> dict[str, Any]:
    """Check a REQUEST against its op's closed schema; returns it with defaults filled in."""
    _id_of(obj, "request")
    op = obj.get("op")
    if op not in OPS:
        raise ProtocolError(f"request: unknown op {str(op)[:32]!r}")
    what = f"{op} request"
    base = {"id", "op"}
    if op == "exec":
        _keys(obj, base | {"argv", "cwd", "env", "timeout_ms"}, {"pty", "rows", "cols"}, what)
        argv = obj["argv"]
        if type(argv) is not list or not 1 <= len(argv) <= 4096:
            raise ProtocolError(f"{what}: argv must be a list of 1..4096 strings")
        for arg in argv:
            _text(arg, f"{what}: argv item", max_bytes=128 * 1024, allow_empty=True)
        if not argv[0]:
            raise ProtocolError(f"{what}: argv[0] must not be empty")
        cwd = _text(obj["cwd"], f"{what}: cwd", max_bytes=4096)
        if not cwd.startswith("/"):
            raise ProtocolError(f"{what}: cwd must be an absolute path")
        _env(obj["env"], f"{what}: env")
        _int(obj, "timeout_ms", 0, 2**31 - 1, what)
        if "pty" in obj and type(obj["pty"]) is not bool:
            raise ProtocolError(f"{what}: pty must be a boolean")
        pty = obj.get("pty", False)
        sized = ("rows" in obj) + ("cols" in obj)
        if sized and not pty:
            raise ProtocolError(f"{what}: rows and cols are only for pty execs")
        if sized == 1:
            raise ProtocolError(f"{what}: rows and cols come together")
        if sized:
            _int(obj, "rows", 1, MAX_WINSIZE, what)
            _int(obj, "cols", 1, MAX_WINSIZE, what)
        if pty:
            rows, cols = DEFAULT_WINSIZE
            return {**obj, "pty": True, "rows": obj.get("rows", rows), "cols": obj.get("cols", cols)}
        return {**obj, "pty": False}
    if op == "resize":
        _keys(obj, base | {"target", "rows", "cols"}, set(), what)
        _int(obj, "target", 0, MAX_U32, what)
        _int(obj, "rows", 1, MAX_WINSIZE, what)
        _int(obj, "cols", 1, MAX_WINSIZE, what)
        return dict(obj)
    if op == "signal":
        _keys(obj, base | {"target", "signal"}, set(), what)
        _int(obj, "target", 0, MAX_U32, what)
        if type(obj["signal"]) is not int or obj["signal"] not in ALLOWED_SIGNALS:
            raise ProtocolError(f"{what}: signal must be one of {sorted(ALLOWED_SIGNALS)}")
        return dict(obj)
    if op == "files":
        _keys(obj, base | {"path", "max_bytes"}, set(), what)
        _text(obj["path"], f"{what}: path", max_bytes=4096)
        _int(obj, "max_bytes", 0, MAX_FILES_READ, what)
        return dict(obj)
    _keys(obj, base, set(), what)  # diff, shutdown, ping
    return dict(obj)


def _validate_error(obj: dict[str, Any]) -> None:
    _keys(obj, {"id", "ok", "error"}, set(), "error response")
    error = obj["error"]
    if type(error) is not dict:
        raise ProtocolError("error response: error must be an object")
    _keys(error, {"code", "message"}, set(), "error response: error")
    if type(error["code"]) is not str or not _ERROR_CODE.fullmatch(error["code"]):
        raise ProtocolError("error response: code must match [A-Z][A-Z0-9_]{0,31}")
    _text(error["message"], "error response: message", max_bytes=4096, allow_empty=True)


def _validate_file_entry(entry: Any) -> None:
    what = "diff response: files item"
    if type(entry) is not dict:
        raise ProtocolError(f"{what} must be an object")
    _keys(entry, {"path", "change", "binary", "old_mode", "new_mode"}, set(), what)
    _text(entry["path"], f"{what}: path", max_bytes=4 * 4096)
    if entry["change"] not in CHANGES:
        raise ProtocolError(f"{what}: change must be one of {CHANGES}")
    _bool(entry, "binary", what)
    for key in ("old_mode", "new_mode"):
        if entry[key] is not None and entry[key] not in GIT_MODES:
            raise ProtocolError(f"{what}: {key} must be null or one of {GIT_MODES}")
    old, new, change = entry["old_mode"], entry["new_mode"], entry["change"]
    shape_ok = {
        "added": old is None and new is not None,
        "deleted": old is not None and new is None,
        "modified": old is not None and new is not None,
        "mode": old is not None and new is not None and old != new,
    }[change]
    if not shape_ok:
        raise ProtocolError(f"{what}: modes {old!r}/{new!r} do not fit change {change!r}")


def validate_response(obj: Any, op: str) -> dict[str, Any]:
    """Check a RESPONSE to a request of ``op`` (the host knows which op each id belongs to)."""
    _id_of(obj, "response")
    if op not in OPS:
        raise ProtocolError(f"response: unknown op {op!r}")
    if obj.get("ok") is False:
        _validate_error(obj)
        return obj
    if obj.get("ok") is not True:
        raise ProtocolError("response: ok must be a boolean")
    what = f"{op} response"
    base = {"id", "ok"}
    if op == "exec":
        _keys(obj, base | {"pid"}, set(), what)
        _int(obj, "pid", 1, 2**31 - 1, what)
    elif op == "diff":
        _keys(obj, base | {"size", "sha256", "files", "files_truncated"}, set(), what)
        _int(obj, "size", 0, MAX_SAFE_INTEGER, what)
        if type(obj["sha256"]) is not str or not _SHA256.fullmatch(obj["sha256"]):
            raise ProtocolError(f"{what}: sha256 must be 'sha256:' and 64 lowercase hex digits")
        if type(obj["files"]) is not list:
            raise ProtocolError(f"{what}: files must be a list")
        for entry in obj["files"]:
            _validate_file_entry(entry)
        _bool(obj, "files_truncated", what)
    elif op == "files":
        _keys(obj, base | {"size", "truncated"}, set(), what)
        _int(obj, "size", 0, MAX_FILES_READ, what)
        _bool(obj, "truncated", what)
    else:
        _keys(obj, base, set(), what)
    return obj


def validate_exit(obj: Any) -> dict[str, Any]:
    """Check an EXIT payload: exactly one of exit_code (0..255) and signal (1..64) is set."""
    _id_of(obj, "exit")
    _keys(obj, {"id", "exit_code", "signal", "timed_out"}, set(), "exit")
    code, sig = obj["exit_code"], obj["signal"]
    if (code is None) == (sig is None):
        raise ProtocolError("exit: exactly one of exit_code and signal must be set")
    if code is not None:
        _int(obj, "exit_code", 0, 255, "exit")
    else:
        _int(obj, "signal", 1, 64, "exit")
    _bool(obj, "timed_out", "exit")
    return obj


def validate_boot(obj: Any) -> dict[str, Any]:
    """Check the boot configuration (closed schema); returns it with defaults filled in."""
    what = "boot config"
    if type(obj) is not dict:
        raise ProtocolError(f"{what} must be an object")
    _keys(obj, {"box_id", "env", "workspace", "agent_socket", "limits", "clock"}, {*BOOT_PATH_DEFAULTS, "job"}, what)
    _text(obj["box_id"], f"{what}: box_id", max_bytes=128)
    _env(obj["env"], f"{what}: env")
    for key in ("workspace", "agent_socket", *BOOT_PATH_DEFAULTS):
        if key in obj:
            path = _text(obj[key], f"{what}: {key}", max_bytes=4096)
            if not path.startswith("/"):
                raise ProtocolError(f"{what}: {key} must be an absolute path")
    limits = obj["limits"]
    if type(limits) is not dict:
        raise ProtocolError(f"{what}: limits must be an object")
    _keys(limits, {"exec_timeout_ms", "max_execs"}, set(), f"{what}: limits")
    _int(limits, "exec_timeout_ms", 0, 2**31 - 1, f"{what}: limits")
    _int(limits, "max_execs", 1, 1024, f"{what}: limits")
    _int(obj, "clock", 0, MAX_SAFE_INTEGER, what)
    if "job" in obj:  # the in-box user execs run as (absent: as the guest itself, on test hosts only)
        job = obj["job"]
        if type(job) is not dict:
            raise ProtocolError(f"{what}: job must be an object")
        _keys(job, {"uid", "gid", "home"}, set(), f"{what}: job")
        _int(job, "uid", 1, 2**31 - 1, f"{what}: job")
        _int(job, "gid", 1, 2**31 - 1, f"{what}: job")
        home = _text(job["home"], f"{what}: job: home", max_bytes=4096)
        if not home.startswith("/"):
            raise ProtocolError(f"{what}: job: home must be an absolute path")
    return {**BOOT_PATH_DEFAULTS, **obj}
