"""Fixtures of the end-to-end tests: ``daemon``, a real signer and daemon (``tkbox signer up`` and a daemon
process) for one test; a test module with its own ``daemon`` fixture uses that one instead."""

from __future__ import annotations

import pytest

from e2e.daemon_process import daemon_process
from e2e.signer_process import tkbox


@pytest.fixture
def daemon():
    tkbox("signer", "up")
    with daemon_process() as running:
        yield running
    tkbox("signer", "down", check=False)
