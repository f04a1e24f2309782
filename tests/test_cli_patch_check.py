"""``tkbox patch check FILE``: the real command on corpus files and on patches the guest writes.

Exit statuses: 0 all accepted, 3 only --allow-sensitive missing, 1 refused, 2 the check could not run.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.patch_trees import entry, guest_patch
from tkbox_tui.cli.main import main

CORPUS = Path(__file__).parent / "corpus" / "patches"
TKBOX = str(Path(sys.executable).parent / "tkbox")
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["patch", "check", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_an_ordinary_patch_is_accepted(capsys):
    status, out, _ = run(capsys, str(CORPUS / "modify_text.patch"))
    assert status == 0
    assert "modify" in out and "m.txt" in out and "accept" in out and "all accepted" in out


def test_a_format_patch_file_is_read_with_its_mail_text(capsys):
    assert run(capsys, str(CORPUS / "format_patch_mail.patch"))[0] == 0


@pytest.mark.parametrize("path", [".github/workflows/ci.yml", ".env"])
def test_a_sensitive_file_needs_allow_sensitive(capsys, tmp_path, path):
    patch = tmp_path / "p.patch"
    patch.write_bytes(guest_patch({}, {path.encode(): entry("x\n"), b"src/ok.py": entry("print()\n")}))
    status, out, _ = run(capsys, str(patch))
    assert status == 3
    assert f"{path}  needs --allow-sensitive (" in out
    assert "src/ok.py  accept" in out
    status, out, _ = run(capsys, str(patch), "--allow-sensitive")
    assert status == 0 and "--allow-sensitive given" in out


def test_a_sensitive_rename_source_counts_too(capsys, tmp_path):
    patch = tmp_path / "p.patch"
    patch.write_bytes(b"diff --git a/.env b/notes.txt\nsimilarity index 100%\nrename from .env\nrename to notes.txt\n")
    status, out, _ = run(capsys, str(patch))
    assert status == 3 and ".env -> notes.txt" in out


@pytest.mark.parametrize(("name", "rule"), [("dev_null_without_new_file_mode.patch", "dev-null-without-mode"),
                                            ("path_dotgit_hfs_zwnj.patch", "path-dotgit"),
                                            ("line_past_hunk_count.patch", "line-past-hunk"),
                                            ("symlink_escapes.patch", "symlink-target-escapes")])
def test_a_hostile_patch_is_refused_naming_the_rule(capsys, name, rule):
    status, out, _ = run(capsys, str(CORPUS / name))
    assert status == 1
    assert f"[{rule}]" in out and "refused as a whole" in out


def test_paths_are_escaped_for_the_terminal(capsys):
    status, out, _ = run(capsys, str(CORPUS / "path_escape_sequence.patch"))
    assert status == 1
    assert "\x1b" not in out and "\\x1b[2Jy" in out


def test_json_reports_each_file_and_the_verdict(capsys, tmp_path):
    patch = tmp_path / "p.patch"
    patch.write_bytes(guest_patch({b"run.sh": entry("a\n")}, {b"run.sh": entry("a\n", 0o100755), b".env": entry("")}))
    status, out, _ = run(capsys, str(patch), "--json")
    report = json.loads(out)
    assert status == 3 and report["verdict"] == "needs_allow_sensitive" and report["refusal"] is None
    files = {file["path"]: file for file in report["files"]}
    assert files[".env"]["action"] == "add" and files[".env"]["verdict"] == "needs_allow_sensitive"
    assert files[".env"]["sensitive"] and files[".env"]["new_size"] == 0
    assert files["run.sh"]["action"] == "mode" and files["run.sh"]["new_mode"] == "100755"
    assert files["run.sh"]["verdict"] == "accept" and files["run.sh"]["sensitive"] is None


def test_json_names_the_refusal(capsys):
    status, out, _ = run(capsys, str(CORPUS / "binary_delta.patch"), "--json")
    report = json.loads(out)
    assert status == 1 and report["verdict"] == "refused" and report["files"] == []
    assert report["refusal"]["rule"] == "binary-delta" and report["refusal"]["path"] == "b.bin"
    assert isinstance(report["refusal"]["line"], int)


def test_stdin_is_read_with_a_dash(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((CORPUS / "add_text.patch").read_bytes())))
    assert run(capsys, "-")[0] == 0


@pytest.mark.parametrize("argv", [[], ["frobnicate"]])
def test_usage_mistakes_exit_2(capsys, argv):
    assert main(["patch", *argv]) == 2
    assert "tkbox patch" in capsys.readouterr().err


def test_a_missing_file_exits_2(capsys, tmp_path):
    status, _, err = run(capsys, str(tmp_path / "nope.patch"))
    assert status == 2 and "cannot read" in err


def test_the_installed_command_gives_the_same_statuses():
    refused = subprocess.run([TKBOX, "patch", "check", str(CORPUS / "smuggled_traditional_direct.patch")],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "[traditional-patch]" in refused.stdout
    accepted = subprocess.run([TKBOX, "patch", "check", "--json", str(CORPUS / "binary_modify.patch")],
                              capture_output=True, text=True, timeout=60)
    assert accepted.returncode == 0 and json.loads(accepted.stdout)["verdict"] == "accepted"
