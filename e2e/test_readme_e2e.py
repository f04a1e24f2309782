"""The README's hand-run example runs as written: its shell block, line by line under ``bash -e``, from a checkout
that has the ``.venv`` the README's first command makes (a link to this one), against the real signer, the real
daemon (started by ``tkbox up --no-console``) and real boxes; the block's last line stops them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.daemon_process import make_checkout
from e2e.signer_process import tkbox
from tkbox_daemon.config import DaemonPaths

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 300


def hand_run_block() -> str:
    readme = (ROOT / "README.md").read_text()
    after = readme[readme.index("Running a box by hand"):]
    start = after.index("```sh\n") + len("```sh\n")
    return after[start: after.index("```", start)]


def test_the_readme_hand_run_example_runs_as_written(tmp_path):
    block = hand_run_block()
    assert "tkbox up" in block and "tkbox down" in block and "make test" not in block
    checkout = make_checkout(tmp_path)
    (checkout / ".gitignore").write_text(".env\n.venv\n")
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    try:
        ran = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=checkout, capture_output=True,
                             text=True, timeout=DEADLINE_S)
    finally:
        tkbox("down", check=False)  # when a line failed, the block's own `tkbox down` never ran
        paths = DaemonPaths.from_env()
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)
    assert ran.returncode == 0, f"stdout:\n{ran.stdout}\nstderr:\n{ran.stderr}"
    assert "Traceback" not in ran.stderr
    patch = (checkout / "job.patch").read_text()
    assert "+++ b/hello.txt" in patch and "+hello" in patch
    begin = ran.stdout.index('\n{\n') + 1  # the one JSON object: tkbox exec --json
    result = json.loads(ran.stdout[begin: ran.stdout.index("\n}\n", begin) + 2])
    assert result["exit_code"] == 0 and "tracked.txt" in result["stdout"]
    assert "daemon stopped; signer stopped" in ran.stdout
    assert (checkout / "hello.txt").read_text() == "hello\n"  # tkbox apply wrote the box's file
    assert "Integrity: VERIFIED" in ran.stdout
