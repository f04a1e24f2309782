"""Approvals: an action the policy answered ``ask`` waits for a person's answer (docs/approvals.md)."""
