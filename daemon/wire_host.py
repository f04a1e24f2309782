"""The wire schema of ``tkbox doctor``: what this host gives a box, shared by the daemon (``GET /v1/host``), the CLI
and the console's daemon page (standard library only, like ``wire``).

A report is a list of checks, each with a status: ``ok``; ``degraded`` (boxes run, but a guarantee is weaker or a
limit is not enforced); ``missing`` (this capability is absent; boxes may still run without it, as when one of two
backends works). ``found`` says what the host has, ``fix`` what to do about it (empty when ``ok``).
"""

from __future__ import annotations

from typing import Any

from .wire_record import field, record

STATUSES = ("ok", "degraded", "missing")


@record(frozen=True)
class HostCheck:
    name: str
    status: str
    found: str
    fix: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "found": self.found, "fix": self.fix,
                "detail": dict(self.detail)}

    @classmethod
    def from_json(cls, value: Any) -> HostCheck:
        if not isinstance(value, dict) or not all(isinstance(value.get(key), str)
                                                  for key in ("name", "status", "found", "fix")):
            raise ValueError("a host check has string name, status, found and fix")
        if value["status"] not in STATUSES:
            raise ValueError(f"a host check's status is one of {', '.join(STATUSES)}")
        detail = value.get("detail", {})
        if not isinstance(detail, dict):
            raise ValueError("a host check's detail is an object")
        return cls(value["name"], value["status"], value["found"], value["fix"], dict(detail))


@record(frozen=True)
class HostReport:
    """``backend``: the backend a daemon would use here ("" when none works); ``summary``: one line for
    ``tkbox up``; ``host``: the distribution and kernel."""

    checks: tuple[HostCheck, ...]
    backend: str
    summary: str
    host: str = ""

    @property
    def boxes_can_run(self) -> bool:
        return bool(self.backend)

    def problems(self) -> list[HostCheck]:
        return [check for check in self.checks if check.status != "ok"]

    def to_json(self) -> dict[str, Any]:
        return {"checks": [check.to_json() for check in self.checks], "backend": self.backend,
                "summary": self.summary, "host": self.host, "boxes_can_run": self.boxes_can_run}

    @classmethod
    def from_json(cls, value: Any) -> HostReport:
        if not isinstance(value, dict) or not isinstance(value.get("checks"), list):
            raise ValueError("a host report has a list of checks")
        if not all(isinstance(value.get(key, ""), str) for key in ("backend", "summary", "host")):
            raise ValueError("a host report has string backend, summary and host")
        return cls(tuple(HostCheck.from_json(check) for check in value["checks"]), value.get("backend", ""),
                   value.get("summary", ""), value.get("host", ""))
