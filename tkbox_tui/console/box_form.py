"""The new-box form's fields, checked one by one with messages that say what to fix (pure, no widgets).

The daemon checks again (``tkbox_daemon.boxes.settings``); these checks exist so the operator sees each problem
next to its field before anything is sent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")
HOST = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:\d{1,5})?\Z")
SECRET = re.compile(r"^[A-Z][A-Z0-9_]{0,63}=env:(?P<var>[A-Za-z_][A-Za-z0-9_]{0,127})@(?P<hosts>[^@\s]+)\Z")
SIZE = re.compile(r"^\d{1,12}([KMG]i?B?|B)?\Z", re.IGNORECASE)
FIELDS = ("name", "workspace", "image", "allow", "secrets", "memory", "cpus", "lifetime")
LIMIT_FIELDS = ("memory", "cpus", "lifetime")


def _split(value: str) -> list[str]:
    return [part for part in re.split(r"[,\s]+", value.strip()) if part]


def check_field(field: str, value: str, environ: Mapping[str, str] | None = None) -> str:
    """What is wrong with one field's text ("" when it is fine)."""
    env = os.environ if environ is None else environ
    value = value.strip()
    if field == "name":
        if value and not NAME.match(value):
            return "use 1-63 of a-z, 0-9 and '-', starting with a letter or digit (or leave empty for a generated name)"
    elif field == "workspace":
        if not value:
            return "give the directory to work on, e.g. ."
        if not Path(value).expanduser().is_dir():
            return f"{value} is not a directory"
    elif field == "image":
        if value and value != "host" and not value.startswith("dir:"):
            return "write host, or dir:PATH for a prepared root directory"
        if value.startswith("dir:") and not Path(value[4:]).is_dir():
            return f"{value[4:]} is not a directory"
    elif field == "allow":
        bad = [host for host in _split(value) if not HOST.match(host.lower())]
        if bad:
            return f"{bad[0]} is not a host; write host, host:port or *.host, separated by commas"
    elif field == "secrets":
        for spec in _split(value):
            match = SECRET.match(spec)
            if not match:
                # Never echo the text: a pasted secret value must not show up on screen.
                return "write NAME=env:VARIABLE@host[,host] (NAME in upper case), separated by spaces"
            if match.group("var") not in env:
                return f"the environment variable {match.group('var')} is not set"
    elif field == "memory":
        if value and not SIZE.match(value):
            return "a size such as 512M or 2G"
    elif field in ("cpus", "lifetime"):
        if value and (not value.isdigit() or int(value) <= 0):
            return "a positive whole number" + (" of seconds" if field == "lifetime" else "")
    return ""


def check_form(values: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every field's problem, by field (empty when the form is fine)."""
    problems = {field: check_field(field, values.get(field, ""), environ) for field in FIELDS}
    return {field: problem for field, problem in problems.items() if problem}


def settings_from_form(values: Mapping[str, str]) -> dict[str, Any]:
    """The ``create_box`` body for a checked form (empty fields left to the daemon's defaults)."""
    settings: dict[str, Any] = {"workspace": str(Path(values["workspace"].strip()).expanduser().resolve())}
    if values.get("name", "").strip():
        settings["name"] = values["name"].strip()
    if values.get("image", "").strip():
        settings["image"] = values["image"].strip()
    if _split(values.get("allow", "")):
        settings["allow"] = [host.lower() for host in _split(values["allow"])]
    if _split(values.get("secrets", "")):
        settings["secrets"] = _split(values["secrets"])
    limits: dict[str, Any] = {}
    for field in LIMIT_FIELDS:
        text = values.get(field, "").strip()
        if text:
            limits[field] = int(text) if text.isdigit() else text
    if limits:
        settings["limits"] = limits
    return settings
