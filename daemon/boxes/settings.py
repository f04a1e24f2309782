"""A box's settings, from `tkbox run` flags, `tkbox.yaml` and the API, checked field by field.

Every refusal names the field, says what was wrong and what to write instead, and quotes a wrong value in JSON's
spelling (``null``, ``false``, ``"text"``), as the settings are written.  Secret *values* never appear in a message,
an event or a record: only names and hosts.

This is the one place a setting is refused, whoever sent it (``tkbox run``, ``tkbox.yaml``, the console's form):
settings for a door that is not built yet (``secrets``) are refused here, not accepted and ignored. ``allow`` is
the egress allowlist (``egress/allowlist.py``, presets expanded here: the box holds their entries) and ``resolve``
its pinned names (``egress/pins.py``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import limits
from ..box.disk import SMALLEST_DISK
from ..egress.allowlist import Allowlist, EntryError, check_reachable
from ..egress.pins import PinError, parse_pins
from ..egress.presets import UnknownPreset, expand

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z", re.ASCII)
HOST = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:\d{1,5})?\Z", re.ASCII)
SECRET_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}\Z", re.ASCII)
SECRET_SPEC = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]{0,63})=env:(?P<var>[A-Za-z_][A-Za-z0-9_]{0,127})@(?P<hosts>[^@]+)\Z", re.ASCII)
LIMIT_FIELDS = {
    "memory": limits.BOX_MEMORY, "cpus": limits.BOX_VCPUS, "pids": limits.BOX_PIDS, "disk": limits.BOX_DISK,
    "lifetime": limits.BOX_LIFETIME,
    "exec_timeout": limits.EXEC_TIMEOUT, "execs": limits.EXECS_PER_BOX,
    "workspace_files": limits.WORKSPACE_FILES, "workspace_bytes": limits.WORKSPACE_BYTES,
}
SETTINGS_FIELDS = {"name", "workspace", "image", "allow", "resolve", "inspect", "secrets", "limits", "task"}
INSPECT_MODES = {  # inspect: what the egress proxy reads, and what becomes of a host off the allowlist
    "bound": "plain HTTP is read, TLS tunnels are checked by their ClientHello; a host off the list is held for a "
             "person",
    "all": "as bound, and a host off the list is refused at once, never held for a person (reading every HTTPS "
           "host comes with the secret door, which is not built yet)",
}


def inspect_markdown() -> str:
    """The docs' table of inspect modes (docs/egress.md, checked by a test)."""
    return "| mode | what it does |\n|---|---|\n" + "".join(
        f"| `{mode}` | {why} |\n" for mode, why in INSPECT_MODES.items())
SIZE = re.compile(r"^(\d{1,12})([KMG]i?B?|B)?\Z", re.IGNORECASE | re.ASCII)
DOORS_NOT_BUILT = {  # setting -> (why it cannot be honoured yet, the tkbox run flag that sets it)
    "secrets": ("the secret door is not built yet: a box cannot be given a secret", "--secret"),
}


class SettingsError(ValueError):
    """A setting is wrong; ``field`` names it and the message says what to do."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class Secret:
    name: str
    source_var: str
    hosts: tuple[str, ...]
    header: str = "Authorization"


@dataclass(frozen=True)
class BoxSettings:
    name: str
    workspace: Path
    image: str = "host"
    allow: tuple[str, ...] = ()
    secrets: tuple[Secret, ...] = ()
    limits: dict[str, int] = field(default_factory=dict)
    task: str = ""
    allow_presets: tuple[str, ...] = ()  # the presets ``allow`` named (their entries are in ``allow``)
    resolve: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pinned name -> addresses
    inspect: str = "bound"  # one of INSPECT_MODES

    def limit(self, key: str) -> int:
        return self.limits.get(key, LIMIT_FIELDS[key].default)

    def public(self) -> dict[str, Any]:
        """What may be shown and recorded (the tkbox.box observation): never a secret value."""
        return {
            "name": self.name,
            "workspace": str(self.workspace),
            "image": self.image,
            "allow": list(self.allow),
            "allow_presets": list(self.allow_presets),
            "resolve": {name: list(addresses) for name, addresses in self.resolve.items()},
            "inspect": self.inspect,
            "secrets": [{"name": s.name, "hosts": list(s.hosts), "header": s.header} for s in self.secrets],
            "limits": {key: self.limit(key) for key in LIMIT_FIELDS},
        }


def _shown(value: Any) -> str:
    """A wrong value as the message quotes it: JSON's spelling, ASCII (``null``, not ``None``)."""
    return json.dumps(value, default=str)


def parse_size(field_name: str, value: Any) -> int:
    if type(value) is int and value > 0:
        return value
    match = SIZE.match(str(value).strip()) if isinstance(value, str) else None
    if not match:
        raise SettingsError(field_name, f"{_shown(value)} is not a size; write e.g. 512M, 2G or a number of bytes")
    number, unit = int(match.group(1)), (match.group(2) or "B").upper()[:1]
    return number * {"B": 1, "K": limits.KIB, "M": limits.MIB, "G": limits.GIB}[unit]


def parse_settings(raw: dict[str, Any], *, default_name: str, environ: dict[str, str] | None = None) -> BoxSettings:
    """Check every field of ``raw`` (API body or tkbox.yaml) and build BoxSettings."""
    unknown = set(raw) - SETTINGS_FIELDS
    if unknown:
        raise SettingsError(sorted(unknown)[0], f"unknown setting; the settings are {', '.join(sorted(SETTINGS_FIELDS))}")
    name = default_name if raw.get("name") is None else raw["name"]  # `name: no` in YAML is false, not absent
    if not isinstance(name, str) or not NAME.match(name):
        raise SettingsError("name", f"{_shown(name)} must be 1-63 of a-z, 0-9 and '-', starting with a letter or digit")
    workspace = raw.get("workspace", ".")
    if not isinstance(workspace, str) or not workspace:
        raise SettingsError("workspace", "give the path of a directory (the checkout to work on)")
    workspace_path = Path(workspace).expanduser().resolve()
    if not workspace_path.is_dir():
        raise SettingsError("workspace", f"{workspace_path} is not a directory")
    image = raw.get("image", "host")
    if not isinstance(image, str) or not (image == "host" or image.startswith("dir:")):
        raise SettingsError("image", f"{_shown(image)} is not supported; use 'host' or 'dir:PATH' (OCI images come later)")
    if image.startswith("dir:") and not Path(image[4:]).is_dir():
        raise SettingsError("image", f"{image[4:]} is not a directory holding a root filesystem")
    for key, (why, flag) in DOORS_NOT_BUILT.items():
        if raw.get(key):
            raise SettingsError(key, f"{why}; leave it out (tkbox run {flag}, {key}: in tkbox.yaml)")
    allow, allow_presets = _parse_allow(raw.get("allow", []))
    try:
        resolve = parse_pins(raw.get("resolve", {}))
    except PinError as exc:
        raise SettingsError("resolve", str(exc)) from None
    inspect = raw.get("inspect", "bound")
    if not isinstance(inspect, str) or inspect not in INSPECT_MODES:
        raise SettingsError("inspect", f"{_shown(inspect)} is not an inspect mode; write "
                            + " or ".join(f"{mode} ({why})" for mode, why in INSPECT_MODES.items()))
    secrets = tuple(_parse_secret(spec, environ) for spec in _as_list("secrets", raw.get("secrets", [])))
    box_limits = _parse_limits(raw.get("limits", {}))
    task = raw.get("task", "")
    if not isinstance(task, str) or len(task) > 64 * 1024:
        raise SettingsError("task", "the task is text of at most 64 KiB")
    return BoxSettings(name, workspace_path, image, allow, secrets, box_limits, task, allow_presets, resolve,
                       inspect)


def _parse_allow(value: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The allowlist's entries (canonical texts, presets expanded) and the presets named."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SettingsError("allow", "a list of hosts: host, host:port, *.host, an IP address or preset:NAME")
    try:
        texts, presets = expand(value)
        allowlist = Allowlist.parse(texts)
        check_reachable(allowlist.entries)
    except (EntryError, UnknownPreset) as exc:
        raise SettingsError("allow", str(exc)) from None
    return tuple(allowlist.texts()), presets


def _as_list(field_name: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise SettingsError(field_name, "expected a list")
    return value


def _parse_secret(spec: Any, environ: dict[str, str] | None) -> Secret:
    env = os.environ if environ is None else environ
    if not isinstance(spec, str):
        raise SettingsError("secrets", "each secret is NAME=env:VARIABLE@host[,host…]")
    match = SECRET_SPEC.match(spec)
    if not match:
        # Never quote the spec: a pasted value must not reach a message.
        raise SettingsError("secrets", "each secret is NAME=env:VARIABLE@host[,host…] (NAME in upper case; hosts "
                                       "exact, no wildcards)")
    hosts = tuple(h.strip().lower() for h in match.group("hosts").split(","))
    if not all(HOST.match(h) and not h.startswith("*.") for h in hosts):
        raise SettingsError("secrets", f"secret {match.group('name')}: bind it to exact host names (no wildcards)")
    if match.group("var") not in env:
        raise SettingsError("secrets", f"secret {match.group('name')}: the environment variable "
                                       f"{match.group('var')} is not set")
    return Secret(match.group("name"), match.group("var"), hosts)


def _parse_limits(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise SettingsError("limits", f"a mapping of {', '.join(sorted(LIMIT_FIELDS))}")
    result = {}
    for key, value in raw.items():
        if key not in LIMIT_FIELDS:
            raise SettingsError(f"limits.{key}", f"unknown limit; the limits are {', '.join(sorted(LIMIT_FIELDS))}")
        unit = LIMIT_FIELDS[key].unit
        parsed = parse_size(f"limits.{key}", value) if unit == "bytes" else value
        if type(parsed) is not int or parsed <= 0:
            raise SettingsError(f"limits.{key}", f"a positive whole number of {unit}")
        if key == "disk" and parsed < SMALLEST_DISK:
            raise SettingsError("limits.disk", f"{_shown(value)} is too small for a box's disk; give at least "
                                               f"{SMALLEST_DISK // limits.MIB}M")
        result[key] = parsed
    return result


def load_tkbox_yaml(path: Path) -> dict[str, Any]:
    """Read ``tkbox.yaml`` with safe_load; a malformed file names the file and what is wrong."""
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SettingsError(str(path), f"not valid YAML: {exc}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SettingsError(str(path), "the top level must be a mapping of settings")
    return loaded
