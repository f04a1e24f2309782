"""Fixtures for every test (tests/ and e2e/): isolated XDG and signer directories, Hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("fast", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every XDG and signer directory into the test's own temporary directory."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    # Unix socket paths are limited to 108 bytes; keep runtime dirs short.
    runtime = Path(f"/tmp/tkr-{os.getpid()}-{abs(hash(str(tmp_path))) % 10**8}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("TKBOX_SIGNER_DATA_DIR", raising=False)
    monkeypatch.delenv("TKBOX_SIGNER_RUNTIME_DIR", raising=False)
    yield home
    import shutil

    shutil.rmtree(runtime, ignore_errors=True)
