"""The changes door end to end: a real signer, the real ``tkbox daemon``, a real bubblewrap box, real git, and the
``tkbox`` console script — a box writes, edits, deletes, renames and chmods files; it stops; ``tkbox apply`` writes
exactly that to the checkout, each file decided by the signer (a ``Write`` decision per file in the record), and
refuses, writing nothing, whatever it cannot vouch for.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from e2e.daemon_process import daemon_process
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.bundle_records import record_events

pytestmark = pytest.mark.e2e

WAIT = 60
JOB = ("echo new > new.txt; printf 'one\\nTWO\\nthree\\n' > edit.txt; rm gone.txt; mv old.txt moved.txt; "
       "chmod +x run.sh; mkdir -p deep/er; printf 'x\\r\\ny\\r\\n' > deep/er/crlf.txt")
HELD = re.compile(r"held: writing (\S+) waits for a person \((apr-[0-9a-f]{16}),")


def make_checkout(base: Path) -> Path:
    checkout = base / "checkout"
    checkout.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(base)}
    subprocess.run(["git", "init", "-q", str(checkout)], check=True, env=env)
    (checkout / "edit.txt").write_text("one\ntwo\nthree\n")
    (checkout / "gone.txt").write_text("to be deleted\n")
    (checkout / "old.txt").write_text("moved, not changed\n")
    (checkout / "run.sh").write_text("#!/bin/sh\necho run\n")
    (checkout / ".github" / "workflows").mkdir(parents=True)
    (checkout / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    # The command door would ask about a shell line that writes a CI file; a script it runs is not read (the
    # changes door is where such a write is caught).
    (checkout / "tools").mkdir()
    (checkout / "tools" / "ci.sh").write_text("printf '%s\\n' \"$1\" > .github/workflows/ci.yml\n")
    subprocess.run(["git", "-C", str(checkout), "add", "."], check=True, env=env)
    return checkout


def bundle_records(bundle: Path) -> list[dict]:
    """The run's records in the bundle (each record's event: type and data)."""
    return record_events(bundle)


def tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every file and symlink under ``root`` but .git: kind+mode and content (a symlink's target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative == ".git" or relative.startswith(".git/"):
            continue
        if path.is_symlink():
            out[relative] = ("link", os.readlink(path).encode())
        elif path.is_file():
            out[relative] = (oct(path.stat().st_mode & 0o777), path.read_bytes())
    return out


@pytest.fixture
def checkout(tmp_path):
    return make_checkout(tmp_path)


@pytest.fixture
def daemon():
    tkbox("signer", "up")
    with daemon_process(backend="bwrap") as process:
        yield process
    tkbox("signer", "down", check=False)


def run_job(checkout: Path, job: str = JOB, name: str = "work") -> dict:
    info = tkbox_json("run", "--name", name, "--workspace", str(checkout))
    tkbox("exec", name, "--", "sh", "-c", job)
    tkbox("stop", name)
    return info


def apply(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TKBOX, "apply", *args], capture_output=True, text=True, timeout=WAIT * 2)


def test_apply_writes_what_the_box_did_each_file_decided(daemon, checkout):
    before = tree(checkout)
    run_job(checkout)
    assert tree(checkout) == before  # the box changed its own copy only
    preview = json.loads(apply("work", "--dry-run", "--json").stdout)
    by_path = {file["path"]: file for file in preview["files"]}
    assert preview["status"] == "dry_run"
    assert {path: file["action"] for path, file in by_path.items()} == {
        "new.txt": "add", "edit.txt": "modify", "gone.txt": "delete", "moved.txt": "add", "old.txt": "delete",
        "run.sh": "mode", "deep/er/crlf.txt": "add"}
    assert all(file["verdict"] == "allow" and file["checkout"] == "matches" for file in by_path.values())
    assert tree(checkout) == before  # a dry run writes nothing
    result = apply("work", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "applied" and report["run_id"]
    assert {file["outcome"] for file in report["files"]} == {"written"}
    assert all(file["decision_id"].startswith("dec-") for file in report["files"])
    after = tree(checkout)
    assert after["new.txt"] == ("0o644", b"new\n") and after["edit.txt"][1] == b"one\nTWO\nthree\n"
    assert "gone.txt" not in after and "old.txt" not in after
    assert after["moved.txt"][1] == b"moved, not changed\n" and after["run.sh"][0] == "0o755"
    assert after["deep/er/crlf.txt"][1] == b"x\r\ny\r\n"
    again = apply("work", "--json")  # the checkout now holds the post-images: every file is refused
    assert again.returncode == 1 and json.loads(again.stdout)["status"] == "refused"
    assert tree(checkout) == after
    bundle = checkout.parent / "run.tkb"
    tkbox("export", "work", "-o", str(bundle))
    verified = tkbox("verify", str(bundle), "--trust", str(checkout.parent / "run.trust.json"))
    assert "Integrity: VERIFIED" in verified.stdout
    records = bundle_records(bundle)
    writes = {record["data"]["decision_id"] for record in records
              if record["type"] == "policy.decision" and record["data"]["tool"] == "Write"}
    assert writes == {file["decision_id"] for file in report["files"]}
    results = {record["data"]["decision_id"]: record["data"]["status"] for record in records
               if record["type"] == "tool.result"}
    assert all(results[decision] == "ok" for decision in writes)
    applied = [record for record in records if record["type"] == "input.observed"
               and record["data"].get("source") == "tkbox.apply"]
    assert len(applied) == 2  # the apply that wrote, and the one refused after it

def test_a_sensitive_file_needs_allow_sensitive_then_a_person(daemon, checkout):
    run_job(checkout, "sh tools/ci.sh 'on: [push, pull_request]'; echo fine > ok.txt")
    before = tree(checkout)
    refused = apply("work")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "sensitive" in refused.stdout and ".github/workflows/ci.yml" in refused.stdout
    assert tree(checkout) == before
    process = subprocess.Popen([TKBOX, "apply", "work", "--allow-sensitive", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    held = HELD.search(line)
    assert held is not None and held.group(1) == ".github/workflows/ci.yml", line
    assert tree(checkout) == before  # nothing is written while a file waits
    tkbox("approve", held.group(2))
    out, _ = process.communicate(timeout=WAIT)
    assert process.returncode == 0, out
    report = json.loads(out)
    ci = next(file for file in report["files"] if file["path"] == ".github/workflows/ci.yml")
    assert ci["verdict"] == "ask" and "TK-A002" in ci["rule_ids"] and ci["approval_id"] == held.group(2)
    assert (checkout / ".github/workflows/ci.yml").read_text() == "on: [push, pull_request]\n"
    bundle = checkout.parent / "run.tkb"
    tkbox("export", "work", "-o", str(bundle))
    verified = tkbox("verify", str(bundle), "--trust", str(checkout.parent / "run.trust.json"))
    assert "Integrity: VERIFIED" in verified.stdout and "[PASS] approvals" in verified.stdout
    order = [(record["type"], record["data"].get("source", "")) for record in bundle_records(bundle)
             if record["data"].get("decision_id") == ci["decision_id"]]
    assert order == [("policy.decision", ""), ("input.observed", "tkbox.approval"), ("tool.result", "")]


def test_a_rejected_file_means_nothing_is_written(daemon, checkout):
    run_job(checkout, "sh tools/ci.sh 'on: []'; echo fine > ok.txt")
    before = tree(checkout)
    process = subprocess.Popen([TKBOX, "apply", "work", "--allow-sensitive", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    held = HELD.search(process.stderr.readline())
    assert held is not None
    tkbox("reject", held.group(2), "--reason", "not this week")
    out, _ = process.communicate(timeout=WAIT)
    report = json.loads(out)
    assert process.returncode == 1 and report["status"] == "refused"
    outcomes = {file["path"]: (file["outcome"], file["outcome_reason"]) for file in report["files"]}
    assert outcomes[".github/workflows/ci.yml"][0] == "refused"
    assert "not this week" in outcomes[".github/workflows/ci.yml"][1]
    assert outcomes["ok.txt"][0] == "not_written"
    assert tree(checkout) == before


def test_only_writes_the_chosen_files_and_declines_the_rest(daemon, checkout):
    run_job(checkout)
    before = tree(checkout)
    report = json.loads(apply("work", "--only", "new.txt", "--only", "edit.txt", "--json").stdout)
    outcomes = {file["path"]: file["outcome"] for file in report["files"]}
    assert outcomes.pop("new.txt") == "written" and outcomes.pop("edit.txt") == "written"
    assert set(outcomes.values()) == {"declined"}
    after = tree(checkout)
    assert set(after) - set(before) == {"new.txt"} and after["gone.txt"] == before["gone.txt"]
    unknown = apply("work", "--only", "nope.txt")
    assert unknown.returncode == 1 and "not in the patch" in unknown.stdout


def test_a_checkout_changed_after_the_box_started_is_refused(daemon, checkout):
    run_job(checkout)
    (checkout / "edit.txt").write_text("someone else's edit\n")
    (checkout / "new.txt").write_text("already here\n")
    before = tree(checkout)
    result = apply("work", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["status"] == "refused"
    checkout_state = {file["path"]: file["checkout"] for file in report["files"]}
    assert "changed since the box started" in checkout_state["edit.txt"]
    assert "already exists" in checkout_state["new.txt"] and checkout_state["run.sh"] == "matches"
    assert tree(checkout) == before


def test_a_symlinked_parent_in_the_checkout_is_refused_and_nothing_lands_outside(daemon, checkout, tmp_path):
    run_job(checkout, "mkdir -p sub && echo inside > sub/file.txt && echo top > top.txt")
    outside = tmp_path / "outside"
    outside.mkdir()
    (checkout / "sub").symlink_to(outside)
    before = tree(checkout)
    result = apply("work", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["status"] == "refused"
    assert any("symlink" in file["checkout"] for file in report["files"] if file["path"] == "sub/file.txt")
    assert list(outside.iterdir()) == [] and tree(checkout) == before


def test_apply_refuses_a_running_box(daemon, checkout):
    tkbox_json("run", "--name", "live", "--workspace", str(checkout))
    result = apply("live")
    assert result.returncode != 0 and "stop it first: tkbox stop live" in result.stderr


def test_a_client_that_goes_away_while_held_withdraws_and_writes_nothing(daemon, checkout):
    run_job(checkout, "sh tools/ci.sh 'on: []'")
    before = tree(checkout)
    process = subprocess.Popen([TKBOX, "apply", "work", "--allow-sensitive"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    held = HELD.search(process.stderr.readline())
    assert held is not None
    follower = subprocess.Popen([TKBOX, "approvals", "--all", "--follow", "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    assert follower.stdout is not None
    try:
        assert json.loads(follower.stdout.readline())["approval"]["state"] == "pending"
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=WAIT)
        assert process.returncode == 130
        answered = json.loads(follower.stdout.readline())  # the next line: its end
    finally:
        follower.kill()
        follower.wait()
    assert answered["approval"]["id"] == held.group(2) and answered["approval"]["state"] == "withdrawn"
    assert tree(checkout) == before


@pytest.mark.parametrize("how", ["crash", "clean"])
def test_apply_after_a_daemon_restart_records_in_a_run_that_names_the_earlier_one(checkout, how):
    tkbox("signer", "up")
    try:
        with daemon_process(backend="bwrap", keep_layers=True) as first:
            earlier = run_job(checkout, "echo new > new.txt")["run_id"]
            if how == "crash":
                first.process.send_signal(signal.SIGKILL)
                first.process.wait(WAIT)
        with daemon_process(backend="bwrap"):
            listed = tkbox_json("ls")[0]
            assert listed["state"] == "stopped"
            assert listed["run_state"] == ("orphaned" if how == "crash" else "closed")
            report = json.loads(apply("work", "--json").stdout)
            assert report["status"] == "applied" and report["run_id"] != earlier, report["reason"]
            assert (checkout / "new.txt").read_text() == "new\n"
            assert tkbox_json("ls")[0]["run_id"] == report["run_id"]
            exported = subprocess.run([TKBOX, "export", "work", "-o", str(checkout.parent / "run.tkb")],
                                      capture_output=True, text=True)
            if how == "crash":  # the box's first run was lost with the daemon: nothing is exported
                assert exported.returncode != 0 and f"first run {earlier} is still open" in exported.stderr
                assert not (checkout.parent / "run.tkb").exists()
            else:
                assert exported.returncode == 0, exported.stderr
                verified = tkbox("verify", str(checkout.parent / "run.tkb"), "--trust",
                                 str(checkout.parent / "run.trust.json"))
                assert "Integrity: VERIFIED" in verified.stdout
    finally:
        tkbox("signer", "down", check=False)


@pytest.mark.parametrize("job, rule", [  # one per kind: every spelling is in tests/corpus/patches (the parser's)
    ("mkdir -p .GIT && echo evil > .GIT/config && echo ok > ok.txt", "dotgit"),
    ("ln -s ../../outside up && echo ok > ok.txt", "symlink"),
])
def test_a_hostile_box_patch_is_refused_whole_and_nothing_is_written(daemon, checkout, job, rule):
    (checkout / "tools" / "job.sh").write_text(job + "\n")  # the command door would ask about the job's own line
    run_job(checkout, "sh tools/job.sh")
    before = tree(checkout)
    result = apply("work", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["status"] == "refused" and report["files"] == []
    assert rule in report["reason"], report["reason"]
    assert tree(checkout) == before


def test_a_name_with_terminal_controls_is_refused_and_shown_escaped(daemon, checkout):
    run_job(checkout, "printf 'x\\n' > \"$(printf 'evil\\033[31mred')\"")
    before = tree(checkout)
    result = apply("work")
    assert result.returncode == 1 and "path-control-character" in result.stdout
    assert "\x1b" not in result.stdout and "x1b[31mred" in result.stdout  # escaped, never raw
    assert tree(checkout) == before


DENY_VENDOR_PACK = """version: 1
description: the default pack, and vendored code is never written by an agent
extends: [default]
deny:
  - id: TEST-D001
    class: fs
    tool: [Write]
    pattern: '(?<![\\\\w.-])vendor/'
    reason: vendored code is changed upstream, not here
    hint: send the change upstream
"""


def test_a_denied_file_means_nothing_is_written_and_the_denial_is_recorded(checkout, tmp_path):
    pack = tmp_path / "deny-vendor.yaml"
    pack.write_text(DENY_VENDOR_PACK)
    tkbox("signer", "up", "--pack", str(pack))
    try:
        with daemon_process(backend="bwrap"):
            run_job(checkout, "mkdir -p vendor && echo patched > vendor/lib.py && echo fine > ok.txt")
            before = tree(checkout)
            preview = json.loads(apply("work", "--dry-run", "--json").stdout)
            verdicts = {file["path"]: (file["verdict"], file["rule_ids"]) for file in preview["files"]}
            assert verdicts == {"vendor/lib.py": ("deny", ["TEST-D001"]), "ok.txt": ("allow", [])}
            result = apply("work", "--json")
            report = json.loads(result.stdout)
            assert result.returncode == 1 and report["status"] == "refused"
            outcomes = {file["path"]: file["outcome"] for file in report["files"]}
            assert outcomes == {"vendor/lib.py": "refused", "ok.txt": "not_written"}
            assert tree(checkout) == before
            bundle = tmp_path / "run.tkb"
            tkbox("export", "work", "-o", str(bundle))
            records = bundle_records(bundle)
            denied = [record["data"] for record in records if record["type"] == "policy.decision"
                      and record["data"]["tool"] == "Write" and record["data"]["verdict"] == "deny"]
            assert [decision["rule_ids"] for decision in denied] == [["TEST-D001"]]
            assert "Integrity: VERIFIED" in tkbox("verify", str(bundle), "--trust",
                                                  str(tmp_path / "run.trust.json")).stdout
    finally:
        tkbox("signer", "down", check=False)
