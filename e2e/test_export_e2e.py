"""``tkbox export`` end to end: the real signer process, the real ``tkbox daemon``, a real bubblewrap box, and the
``tkbox`` console script as an operator runs it.

A box runs a command, is stopped and exported; ``tkbox verify`` with the printed command says VERIFIED and the
bundle holds the command's decision and result. A running box is refused; a second export gives the same bytes;
a box lost when the daemon was killed is refused at once, with the reason.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.daemon_process import daemon_process, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon import strictjson
from tkbox_daemon.evidence.verify_stream_layout import run_record_lines

pytestmark = pytest.mark.e2e


@pytest.fixture
def signer():
    tkbox("signer", "up")
    yield
    tkbox("signer", "down", check=False)


def _records(bundle: Path) -> list[dict[str, Any]]:
    lines = run_record_lines(bundle)
    return [strictjson.loads_object(line, max_bytes=1 << 20)["event"] for line in lines]


def _verify_as_printed(printed: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the verify command ``tkbox export`` printed, word for word (its ``tkbox`` being this checkout's)."""
    command = printed.splitlines()[-1].removeprefix("verify with: ")
    words = shlex.split(command)
    assert words[:2] == ["tkbox", "verify"], command
    return subprocess.run([TKBOX, *words[1:]], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_stopped_box_exports_a_bundle_that_verifies_with_its_exec_and_exports_again_the_same(signer, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with daemon_process(backend="bwrap"):
        box = tkbox_json("run", "--name", "job", "--workspace", str(make_checkout(tmp_path)))
        ran = subprocess.run([TKBOX, "exec", "job", "--json", "--", "sh", "-c", "echo made > /workspace/new.txt"],
                             capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        decision_id = json.loads(ran.stdout)["decision"]["decision_id"]

        refused = tkbox("export", "job", "-o", str(out / "early.tkb"), check=False)
        assert refused.returncode == 2 and "box job is running" in refused.stderr
        assert "stop it first: tkbox stop job" in refused.stderr and list(out.iterdir()) == []

        tkbox("stop", "job")
        exported = subprocess.run([TKBOX, "export", "job", "-o", "run.tkb"], capture_output=True, text=True,
                                  cwd=out, timeout=120)
        assert exported.returncode == 0, exported.stderr
        verified = _verify_as_printed(exported.stdout, out)
        assert verified.returncode == 0 and "Integrity: VERIFIED." in verified.stdout, verified.stdout
        counted = json.loads(tkbox("verify", str(out / "run.tkb"), "--trust", str(out / "run.trust.json"),
                                   "--json").stdout)
        assert counted["integrity"] == "VERIFIED" and counted["counts"]["execs"] == 1, counted

        records = _records(out / "run.tkb")
        assert records[0]["run_id"] == box["run_id"] and records[-1]["type"] == "run.closed"
        decided = [r["data"] for r in records if r["type"] == "policy.decision"]
        assert [(d["decision_id"], d["tool"], d["verdict"]) for d in decided] == [(decision_id, "Bash", "allow")]
        results = [r["data"] for r in records if r["type"] == "tool.result"]
        assert [(r["decision_id"], r["status"], r.get("exit_code"), r.get("reported_by")) for r in results] == [
            (decision_id, "ok", 0, "guest")]
        assert [r["type"] for r in records].index("policy.decision") < [r["type"] for r in records].index(
            "tool.result")

        listed = {b["name"]: b for b in tkbox_json("ls")}["job"]
        assert listed["run_state"] == "closed" and listed["exported"]["run_id"] == box["run_id"]
        again = tkbox_json("export", "job", "-o", str(out / "again.tkb"))
        assert again["sha256"] == listed["exported"]["sha256"]
        assert (out / "again.tkb").read_bytes() == (out / "run.tkb").read_bytes()
        assert (out / "again.trust.json").read_bytes() == (out / "run.trust.json").read_bytes()
        tkbox("rm", "job")


def test_a_box_lost_when_the_daemon_was_killed_refuses_export_with_the_reason(signer, tmp_path):
    with daemon_process(backend="bwrap") as first:
        live = tkbox_json("run", "--name", "live", "--workspace", str(make_checkout(tmp_path)))
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(30)
    with daemon_process(backend="bwrap"):
        assert {b["name"]: b["state"] for b in tkbox_json("ls")} == {"live": "lost"}
        refused = tkbox("export", "live", "-o", str(tmp_path / "run.tkb"), "--json", check=False)
        error = json.loads(refused.stdout)["error"]
        assert refused.returncode == 2 and error["code"] == "run_orphaned"
        assert f"run {live['run_id']} is still open" in error["message"] and "vouch" in error["message"]
        assert error["hint"].endswith("tkbox rm live")
        assert not (tmp_path / "run.tkb").exists() and not (tmp_path / "run.trust.json").exists()
        tkbox("rm", "live")
