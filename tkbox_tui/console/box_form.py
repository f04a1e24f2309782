"""The new-box form's fields, checked one by one with messages that say what to fix (pure, no widgets).

The daemon checks again (``daemon.boxes.settings``); these checks exist so the operator sees each problem next
to its field before anything is sent. There are no fields for allowed hosts or secrets: those doors are not built
yet, and the daemon refuses a box that asks for them, so the form offers nothing it cannot keep.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")
SIZE = re.compile(r"^\d{1,12}([KMG]i?B?|B)?\Z", re.IGNORECASE)
FIELDS = ("name", "workspace", "image", "memory", "cpus", "lifetime")
LIMIT_FIELDS = ("memory", "cpus", "lifetime")


def check_field(field: str, value: str) -> str:
    """What is wrong with one field's text ("" when it is fine)."""
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
    elif field == "memory":
        if value and not SIZE.match(value):
            return "a size such as 512M or 2G"
    elif field in ("cpus", "lifetime"):
        if value and (not value.isdigit() or int(value) <= 0):
            return "a positive whole number" + (" of seconds" if field == "lifetime" else "")
    return ""


def check_form(values: Mapping[str, str]) -> dict[str, str]:
    """Every field's problem, by field (empty when the form is fine)."""
    problems = {field: check_field(field, values.get(field, "")) for field in FIELDS}
    return {field: problem for field, problem in problems.items() if problem}


def settings_from_form(values: Mapping[str, str]) -> dict[str, Any]:
    """The ``create_box`` body for a checked form (empty fields left to the daemon's defaults)."""
    settings: dict[str, Any] = {"workspace": str(Path(values["workspace"].strip()).expanduser().resolve())}
    if values.get("name", "").strip():
        settings["name"] = values["name"].strip()
    if values.get("image", "").strip():
        settings["image"] = values["image"].strip()
    limits: dict[str, Any] = {}
    for field in LIMIT_FIELDS:
        text = values.get(field, "").strip()
        if text:
            limits[field] = int(text) if text.isdigit() else text
    if limits:
        settings["limits"] = limits
    return settings
