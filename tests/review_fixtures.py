"""A stopped box with a saved patch, for the patch review's tests: its preview (the daemon's dry run), the patch's
bytes and the console against ``FakeDaemonClient``."""

from __future__ import annotations

from typing import Any

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_box,
    make_file,
    make_preview,
    quiet_settings,
    record_notifications,
)
from tkbox_tui.console.app import make_app

PATCH = (
    b"diff --git a/src/app.py b/src/app.py\n"
    b"index 1111111..2222222 100644\n"
    b"--- a/src/app.py\n"
    b"+++ b/src/app.py\n"
    b"@@ -1,4 +1,4 @@\n"
    b" import os\n"
    b"-print('hello')\n"
    b"+print('hello, \x1b[31mworld\x1b[0m')\n"
    b" \n"
    b" def main():\n"
    b"diff --git a/docs/notes.md b/docs/notes.md\n"
    b"new file mode 100644\n"
    b"index 0000000..3333333\n"
    b"--- /dev/null\n"
    b"+++ b/docs/notes.md\n"
    b"@@ -0,0 +1,2 @@\n"
    b"+# Notes\n"
    b"+written in the box\n"
    b"diff --git a/.github/workflows/ci.yml b/.github/workflows/ci.yml\n"
    b"index 4444444..5555555 100644\n"
    b"--- a/.github/workflows/ci.yml\n"
    b"+++ b/.github/workflows/ci.yml\n"
    b"@@ -1,2 +1,3 @@\n"
    b" on: push\n"
    b"+  # run on every push\n"
    b" jobs: {}\n"
    b"diff --git a/old.txt b/old.txt\n"
    b"deleted file mode 100644\n"
    b"index 6666666..0000000\n"
    b"--- a/old.txt\n"
    b"+++ /dev/null\n"
    b"@@ -1 +0,0 @@\n"
    b"-gone\n"
)
APP_PY = make_file("src/app.py")
NOTES = make_file("docs/notes.md", "add", new_size=31)
CI = make_file(".github/workflows/ci.yml", sensitive="CI workflow", verdict="flag", rule_ids=("TK-F008",),
               reason="a file that steers the next run")
OLD = make_file("old.txt", "delete", old_size=5)
SIZE = (120, 36)


def review_app(tmp_path: Any, files: list[Any] | None = None, *, theme: str | None = None,
               patch: bytes = PATCH, **settings: Any) -> tuple[FakeDaemonClient, Any]:
    """The console with one stopped box, ``web-api``, whose saved patch is ``patch`` and whose preview lists
    ``files`` (default: src/app.py, docs/notes.md and old.txt, all allowed)."""
    box = make_box("b1", "web-api", "stopped", last_event="box.stopped", execs_running=0)
    fake = FakeDaemonClient([box])
    fake.previews["b1"] = make_preview(box, files if files is not None else [APP_PY, NOTES, OLD])
    fake.patches["b1"] = patch
    settings.setdefault("prompt_arm_delay", 0)
    if theme is not None:
        settings["theme"] = theme
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", **settings), clock=fixed_clock)
    app.bell = lambda: None  # type: ignore[method-assign]  # headless: nothing to hear
    app.notes = record_notifications(app)  # type: ignore[attr-defined]
    return fake, app


def apply_calls(fake: FakeDaemonClient) -> list[tuple[Any, ...]]:
    """(ref, dry_run, only, allow_sensitive) of every apply the console started."""
    return [call[1:] for call in fake.calls if call[0] == "apply"]
