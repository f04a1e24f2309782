"""docs/cli.md lists every command, and every command answers --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tkbox_tui.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
TKBOX = str(Path(sys.executable).parent / "tkbox")
SUBCOMMANDS = [["signer", name] for name in ("serve", "up", "down", "status", "trust", "export")] + [
    ["policy", "check"], ["patch", "check"], ["verify"], ["demo"], ["up"], ["down"], ["console"], ["daemon"], ["run"], ["exec"], ["ls"], ["stop"], ["rm"], ["diff"], ["export"],
    ["events"], ["approvals"], ["approve"], ["reject"], ["forget"], ["allow"], ["block"], ["allowlist"]]


def test_every_command_is_documented():
    text = (ROOT / "docs" / "cli.md").read_text()
    for name in COMMANDS:
        assert f"`tkbox {name}" in text, f"docs/cli.md does not document tkbox {name}"
    for words in SUBCOMMANDS:
        assert f"`tkbox {' '.join(words)}" in text, words


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=lambda words: " ".join(words))
def test_every_command_answers_help(words):
    result = subprocess.run([TKBOX, *words, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
