"""docs/limits.md is generated from daemon/limits.py: the table there must be exactly the constants' table."""

from __future__ import annotations

from pathlib import Path

from tkbox_daemon import limits

ROOT = Path(__file__).resolve().parents[1]


def test_the_limits_table_in_the_docs_is_the_one_the_code_enforces():
    text = (ROOT / "docs" / "limits.md").read_text()
    table = text.split("<!-- limits:begin -->\n", 1)[1].split("<!-- limits:end -->", 1)[0]
    assert table == limits.markdown_table(), "regenerate with: python -m tkbox_daemon.limits"


def test_every_refusal_names_the_limit_and_how_to_raise_it():
    for limit in limits.ALL_LIMITS:
        message = limit.refusal("detail")
        assert limit.name in message and limit.how_to_raise in message and "detail" in message


def test_seed_table_19_defaults():
    assert limits.BOX_LIFETIME.default == 3600 and limits.EXEC_TIMEOUT.default == 1800
    assert limits.BOXES_PER_DAEMON.default == 8 and limits.EXECS_PER_BOX.default == 64
    assert limits.CONNECTIONS_PER_BOX.default == 256 and limits.PENDING_APPROVALS_PER_BOX.default == 16
    assert limits.APPROVALS_PER_MINUTE.default == 30 and limits.APPROVAL_WAIT.default == 120
    assert limits.BOX_MEMORY.default == 2 * limits.GIB and limits.BOX_VCPUS.default == 2
