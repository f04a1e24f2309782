"""``tkbox export`` as an operator runs it (the console script in a subprocess) against a real daemon in process and a
real signer: the files it writes and how, the verify command it prints (run as printed), refusals, Ctrl+C and the
progress shown on a terminal."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import shlex
import signal
import sys
from pathlib import Path

import pytest

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.signer import exports
from tkbox_daemon.wire import BoxInfo
from tkbox_tui.cli.boxes import run_text
from tkbox_tui.cli.export_command import default_trust_path, verify_command

TKBOX = str(Path(sys.executable).parent / "tkbox")


def _env(daemon) -> dict[str, str]:
    return {**os.environ, "TKBOX_DAEMON_RUNTIME_DIR": str(daemon.config.paths.runtime_dir)}


async def _tkbox(daemon, *args: str, cwd: Path | None = None, stderr: int | None = None,
                 started: asyncio.Event | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        TKBOX, *args, env=_env(daemon), cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if stderr is None else stderr)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode if process.returncode is not None else -1, out.decode(), (err or b"").decode()


async def _stopped_box(daemon, client, tmp_path) -> None:
    await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
    await client.stop_box("t1")


def test_the_trust_file_goes_beside_the_bundle_and_the_verify_command_quotes_paths():
    assert default_trust_path(Path("out/run.tkb")) == Path("out/run.trust.json")
    assert default_trust_path(Path("bundle")) == Path("bundle.trust.json")
    assert default_trust_path(Path(".tkb")) == Path(".tkb.trust.json")
    assert verify_command(Path("my run.tkb"), Path("t.json")) == "tkbox verify 'my run.tkb' --trust t.json"


async def test_export_writes_both_files_and_the_printed_command_verifies_them(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _stopped_box(daemon, client, tmp_path)
        code, stdout, stderr = await _tkbox(daemon, "export", "t1", "-o", "run.tkb", cwd=out)
        assert code == 0, stderr
        assert stderr == ""  # stderr is a pipe: no progress
        assert sorted(p.name for p in out.iterdir()) == ["run.tkb", "run.trust.json"]
        command = stdout.splitlines()[-1]
        assert command == "verify with: tkbox verify run.tkb --trust run.trust.json"
        info = await client.box("t1")
        assert info.run_id in stdout and info.exported["sha256"] in stdout
        verify = await asyncio.create_subprocess_exec(
            TKBOX, *shlex.split(command.removeprefix("verify with: "))[1:], cwd=out,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        report, _ = await asyncio.wait_for(verify.communicate(), 120)
        assert verify.returncode == 0 and b"VERIFIED" in report, report
        code, listed, _ = await _tkbox(daemon, "ls")
        assert code == 0 and f" {info.run_id} exported " in listed


def test_ls_says_what_became_of_each_run():
    def box(**fields):
        return BoxInfo(id="b", name="n", state="stopped", image="host", workspace="/w", created_at="",
                       expires_at="", **{"recorded": True, **fields})

    assert run_text(box(run_id=None, recorded=False)) == "UNRECORDED"
    assert run_text(box(run_id="run-1", run_state="open")) == "run-1 open"
    assert run_text(box(run_id="run-1", run_state="orphaned")) == "run-1 orphaned"
    assert run_text(box(run_id="run-1", run_state="closed", exported={"size": 1})) == "run-1 exported"


async def test_json_prints_one_object_and_an_existing_file_is_kept_unless_forced(tmp_path):
    bundle = tmp_path / "run.tkb"
    bundle.write_bytes(b"mine")
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _stopped_box(daemon, client, tmp_path)
        code, stdout, _ = await _tkbox(daemon, "export", "t1", "-o", str(bundle), "--json")
        assert code == 2 and json.loads(stdout)["error"]["code"] == "output_exists"
        assert bundle.read_bytes() == b"mine" and not (tmp_path / "run.trust.json").exists()
        assert (await client.box("t1")).run_state == "open"  # refused before the daemon was asked anything
        trust = tmp_path / "keys.json"
        code, stdout, stderr = await _tkbox(daemon, "export", "t1", "-o", str(bundle), "--trust", str(trust),
                                            "--force", "--json")
        assert code == 0, stderr
        result = json.loads(stdout)
        assert set(result) == {"box", "run_id", "bundle", "trust", "size", "sha256", "verify"}
        assert result["size"] == bundle.stat().st_size and trust.exists()
        assert result["verify"] == f"tkbox verify {bundle} --trust {trust}"
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


async def test_a_running_box_is_refused_with_what_to_do_and_nothing_is_written(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        code, stdout, stderr = await _tkbox(daemon, "export", "t1", "-o", str(out / "run.tkb"))
        assert code == 2 and stdout == ""
        assert stderr == ("tkbox export: box t1 is running: export closes its run, and a live box keeps deciding; "
                          "stop it first: tkbox stop t1\n")
        assert list(out.iterdir()) == []
        code, _, stderr = await _tkbox(daemon, "export", "t1", "-o", str(tmp_path / "nowhere" / "run.tkb"))
        assert code == 2 and "is not a directory" in stderr


async def test_ctrl_c_mid_export_leaves_no_file_and_exits_130(tmp_path, monkeypatch):
    monkeypatch.setattr(exports, "EXPORT_CHUNK", 512)  # many chunks: the export is stopped between two of them
    out = tmp_path / "out"
    out.mkdir()
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _stopped_box(daemon, client, tmp_path)
        service = daemon.signer.service
        real_read = service._handlers["export_read"]
        stalled, release = asyncio.Event(), asyncio.Event()

        async def stalling_read(identity, request):
            if request["offset"] >= 2 * exports.EXPORT_CHUNK:
                stalled.set()
                await release.wait()
            return await real_read(identity, request)

        service._handlers["export_read"] = stalling_read
        process = await asyncio.create_subprocess_exec(
            TKBOX, "export", "t1", "-o", "run.tkb", env=_env(daemon), cwd=out, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await asyncio.wait_for(stalled.wait(), 60)
        assert [p.name for p in out.iterdir() if p.name.endswith(".part")]  # the bundle was being written
        process.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
        release.set()
        assert process.returncode == 130 and stderr == b"tkbox export: stopped by Ctrl+C\n"
        assert list(out.iterdir()) == []


async def test_a_terminal_is_shown_the_bytes_received_of_the_total(tmp_path, monkeypatch):
    monkeypatch.setattr(exports, "EXPORT_CHUNK", 512)
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _stopped_box(daemon, client, tmp_path)
        main, secondary = pty.openpty()
        try:
            code, stdout, _ = await _tkbox(daemon, "export", "t1", "-o", str(tmp_path / "run.tkb"), stderr=secondary)
        finally:
            os.close(secondary)
        os.set_blocking(main, False)
        shown = b""
        try:
            while chunk := os.read(main, 65536):
                shown += chunk
        except (BlockingIOError, OSError):
            pass
        os.close(main)
    size = (tmp_path / "run.tkb").stat().st_size
    assert code == 0 and "verify with:" in stdout
    total = f"{size / 1024:.1f} KiB"
    lines = shown.decode().replace("\r\n", "\n").split("\r")
    assert lines[0] == "" and all(line.startswith("exporting t1: ") for line in lines[1:]), lines
    assert lines[-1] == f"exporting t1: {total} of {total}\x1b[K\n"  # the last one says all of it, then a newline


@pytest.mark.parametrize("argv", [["export", "t1"], ["export", "-o", "x.tkb"]])
async def test_a_wrong_command_line_names_what_is_missing(tmp_path, argv):
    async with running_daemon(tmp_path) as daemon:
        code, _, stderr = await _tkbox(daemon, *argv)
    assert code == 2 and "see: tkbox export --help" in stderr
