"""The wire schema of the changes door (``tkbox apply``), shared by the daemon, the CLI and the console.

``POST /v1/boxes/{box}/apply`` with ``{"dry_run": bool, "only": [path, …], "allow_sensitive": bool}`` answers a
stream of JSON lines (``application/x-ndjson``): zero or more ``{"type": "held", "path", "approval": ApprovalInfo}``
while a file's ``ask`` waits for a person, then exactly one ``{"type": "report", "report": ApplyReport}``. A dry
run records nothing and holds nothing: its report is the only line.

Paths are the patch's paths relative to the checkout, as UTF-8 text (apply refuses a path that is not UTF-8). They
come from the box: show them escaped, as every box byte is.
"""

from __future__ import annotations

from typing import Any

from .wire_record import as_dict, record

FILE_ACTIONS = ("add", "modify", "delete", "mode", "rename", "copy", "symlink")
"""What the patch does to a file: ``mode`` changes only its mode; ``symlink`` adds, changes or removes a symlink."""

FILE_OUTCOMES = ("", "written", "declined", "refused", "not_written", "rolled_back", "rollback_failed")
"""A file after an apply: ``written``; ``declined`` (left out by the operator: ``--only`` or the console's
review); ``refused`` (by the policy, a person, a check of the checkout, or a rule of the patch); ``not_written``
(the apply stopped before it); ``rolled_back`` (written, then restored from its pre-image after a later failure);
``rollback_failed`` (written and not restored: the reason says why). ``""`` in a dry run."""

REPORT_STATUSES = ("dry_run", "applied", "refused", "partial")
"""``applied``: every included file written; ``refused``: nothing written; ``partial``: a write failed midway (the
files say which were written, rolled back or not)."""


@record(frozen=True)
class ApplyFile:
    """One file of the patch. ``sensitive`` is "" or why the file needs ``allow_sensitive`` (docs/apply.md);
    ``verdict``/``rule_ids``/``reason``/``hint`` are the policy's (a preview in a dry run, the signer's recorded
    decision otherwise; "" when the file was not asked about). ``checkout`` says whether the checkout still holds
    the file's pre-image: ``matches``, or what differs."""

    path: str
    action: str
    old_path: str = ""
    old_mode: str = ""
    new_mode: str = ""
    old_size: int | None = None
    new_size: int | None = None
    binary: bool = False
    sensitive: str = ""
    included: bool = True
    checkout: str = "matches"
    verdict: str = ""
    rule_ids: tuple[str, ...] = ()
    reason: str = ""
    hint: str = ""
    decision_id: str = ""
    approval_id: str = ""
    outcome: str = ""
    outcome_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out = as_dict(self)
        out["rule_ids"] = list(self.rule_ids)
        return out

    @classmethod
    def from_json(cls, value: Any) -> ApplyFile:
        if not isinstance(value, dict) or not isinstance(value.get("path"), str) or \
                value.get("action") not in FILE_ACTIONS:
            raise ValueError("a patch file has a string path and an action of " + ", ".join(FILE_ACTIONS))
        known = {name: value[name] for name in cls.__dataclass_fields__ if name in value}
        for name in ("old_size", "new_size"):
            if known.get(name) is not None and type(known[name]) is not int:
                raise ValueError(f"a patch file's {name} is an integer or null")
        if not isinstance(known.get("rule_ids", []), list) or \
                not all(isinstance(rule, str) for rule in known.get("rule_ids", [])):
            raise ValueError("a patch file's rule_ids is a list of strings")
        known["rule_ids"] = tuple(known.get("rule_ids", ()))
        if known.get("outcome", "") not in FILE_OUTCOMES:
            raise ValueError("a patch file's outcome is one of " + ", ".join(repr(o) for o in FILE_OUTCOMES))
        for name in ("old_path", "old_mode", "new_mode", "sensitive", "checkout", "verdict", "reason", "hint",
                     "decision_id", "approval_id", "outcome_reason"):
            if not isinstance(known.get(name, ""), str):
                raise ValueError(f"a patch file's {name} is a string")
        for name in ("binary", "included"):
            if not isinstance(known.get(name, False), bool):
                raise ValueError(f"a patch file's {name} is true or false")
        return cls(**known)


@record(frozen=True)
class ApplyReport:
    """What an apply did (or, for a dry run, would do). ``reason`` and ``hint`` say why it was refused and what to
    do; ``run_id`` is the run its decisions were recorded in ("" for a dry run)."""

    box_id: str
    box_name: str
    status: str
    files: tuple[ApplyFile, ...] = ()
    patch_sha256: str = ""
    reason: str = ""
    hint: str = ""
    run_id: str = ""

    @property
    def written(self) -> list[ApplyFile]:
        return [file for file in self.files if file.outcome == "written"]

    def to_json(self) -> dict[str, Any]:
        out = as_dict(self)
        out["files"] = [file.to_json() for file in self.files]
        return out

    @classmethod
    def from_json(cls, value: Any) -> ApplyReport:
        if not isinstance(value, dict) or value.get("status") not in REPORT_STATUSES:
            raise ValueError("an apply report has a status of " + ", ".join(REPORT_STATUSES))
        files = value.get("files", [])
        if not isinstance(files, list):
            raise ValueError("an apply report's files is a list")
        for name in ("box_id", "box_name", "patch_sha256", "reason", "hint", "run_id"):
            if not isinstance(value.get(name, ""), str):
                raise ValueError(f"an apply report's {name} is a string")
        return cls(box_id=value.get("box_id", ""), box_name=value.get("box_name", ""), status=value["status"],
                   files=tuple(ApplyFile.from_json(item) for item in files),
                   patch_sha256=value.get("patch_sha256", ""), reason=value.get("reason", ""),
                   hint=value.get("hint", ""), run_id=value.get("run_id", ""))
