"""The real guest agent process against a test host that speaks the protocol over real Unix sockets.

The guest runs exactly as in a box (``python -I -S <folder>``), as a plain subprocess with its sockets and
workspace pointed at temporary directories. No box is needed; the overlay and PID 1 tests need root.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tkbox_guest import protocol as P

ROOT = Path(__file__).resolve().parents[1]
GUEST_DIR = ROOT / "guest"
WAIT = 60.0  # a safety net against hangs, never a timing assertion

pytestmark = pytest.mark.e2e
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (overlay mounts, pid namespaces)")


class GuestHost:
    """A test host: serves the boot config once, accepts the guest's connection and routes its frames by id."""

    def __init__(self, workspace: Path, *, base_dir: Path | None = None, upper_dir: Path | None = None,
                 env: dict[str, str] | None = None, limits: dict[str, int] | None = None,
                 prefix: tuple[str, ...] = (), raw_boot: bytes | None = None) -> None:
        self.sockdir = Path(tempfile.mkdtemp(prefix="tkg-", dir="/tmp"))
        self.boot_path = self.sockdir / "boot.sock"
        self.agent_path = self.sockdir / "agent.sock"
        config: dict[str, Any] = {
            "box_id": "box-test", "env": env or {"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            "workspace": str(workspace), "agent_socket": str(self.agent_path),
            "limits": limits or {"exec_timeout_ms": 0, "max_execs": 64}, "clock": 1_700_000_000_000,
        }
        if base_dir is not None:
            config["base_dir"] = str(base_dir)
        if upper_dir is not None:
            config["upper_dir"] = str(upper_dir)
        self.boot_bytes = raw_boot if raw_boot is not None else P.dumps(config)
        self.prefix = prefix
        self.events: dict[int, asyncio.Queue[tuple[str, Any]]] = defaultdict(asyncio.Queue)
        self.windows: dict[int, P.StdinWindow] = {}
        self.credit = asyncio.Condition()
        self.ops: dict[int, str] = {}
        self.next_id = 1
        self.connected = asyncio.Event()
        self.closed = asyncio.Event()
        self.host_errors: list[str] = []
        self.writer: asyncio.StreamWriter | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- process and sockets ---------------------------------------------------------------------------------

    async def start(self, *, connect: bool = True) -> GuestHost:
        self.boot_server = await asyncio.start_unix_server(self._serve_boot, path=str(self.boot_path))
        self.agent_server = await asyncio.start_unix_server(self._accept, path=str(self.agent_path))
        self.proc = await asyncio.create_subprocess_exec(
            *self.prefix, sys.executable, "-I", "-S", str(GUEST_DIR), "--boot-socket", str(self.boot_path),
            "--drain-ms", "300", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd="/")
        if connect:
            await asyncio.wait_for(self.connected.wait(), WAIT)
        return self

    async def _serve_boot(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(self.boot_bytes)
        await writer.drain()
        writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.connected.set()
        await self._read_frames(reader)

    async def _read_frames(self, reader: asyncio.StreamReader) -> None:
        decoder = P.FrameDecoder(accept=P.GUEST_TO_HOST)
        try:
            while data := await reader.read(1 << 16):
                for frame in decoder.feed(data):
                    await self._route(frame)
            decoder.eof()
        except (P.ProtocolError, ConnectionError) as exc:
            self.host_errors.append(str(exc))
        finally:
            self.closed.set()

    async def _route(self, frame: P.Frame) -> None:
        if frame.type == P.RESPONSE:
            obj = P.loads_strict(frame.payload)
            self.events[obj["id"]].put_nowait(("response", P.validate_response(obj, self.ops[obj["id"]])))
        elif frame.type == P.EXIT:
            obj = P.validate_exit(P.loads_strict(frame.payload))
            self.events[obj["id"]].put_nowait(("exit", obj))
        elif frame.type == P.STDIN_ACK:
            ident, count = P.decode_stdin_ack(frame.payload)
            async with self.credit:
                self.windows[ident].give_back(count)
                self.credit.notify_all()
        else:
            ident, data = P.split_id(frame.payload)
            kind = {P.STDOUT: "stdout", P.STDERR: "stderr", P.DATA: "data"}[frame.type]
            self.events[ident].put_nowait((kind, data))

    async def stop(self) -> tuple[int, str]:
        """Wait for the guest to exit; returns (status, stderr)."""
        _, err = await asyncio.wait_for(self.proc.communicate(), WAIT)
        await self.aclose()
        return self.proc.returncode, err.decode(errors="replace")

    async def aclose(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await asyncio.wait_for(self.proc.wait(), WAIT)
        for server in (self.boot_server, self.agent_server):
            server.close()
        if self.writer is not None:
            self.writer.close()
        for task in list(self._tasks):
            task.cancel()
        shutil.rmtree(self.sockdir, ignore_errors=True)

    # -- sending ----------------------------------------------------------------------------------------------

    async def send_raw(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, op: str, **fields: Any) -> int:
        ident = self.next_id
        self.next_id += 1
        self.ops[ident] = op
        body = P.validate_request({"id": ident, "op": op, **fields})
        if op == "exec":
            self.windows[ident] = P.StdinWindow()
        await self.send_raw(P.encode_json_frame(P.REQUEST, body))
        return ident

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        ident = await self.request(op, **fields)
        return await self.response(ident)

    async def event(self, ident: int) -> tuple[str, Any]:
        return await asyncio.wait_for(self.events[ident].get(), WAIT)

    async def response(self, ident: int) -> dict[str, Any]:
        kind, value = await self.event(ident)
        assert kind == "response", (kind, value)
        return value

    async def feed(self, ident: int, data: bytes, *, eof: bool = True) -> None:
        """Send stdin within the window, waiting for STDIN_ACK credit as the guest drains it."""
        window = self.windows[ident]
        view = memoryview(data)
        while view:
            async with self.credit:
                await self.credit.wait_for(lambda: window.available > 0)
                size = min(window.available, P.MAX_ID_DATA, len(view))
                window.take(size)
                self.credit.notify_all()
            await self.send_raw(P.encode_id_frame(P.STDIN, ident, bytes(view[:size])))
            view = view[size:]
        if eof:
            await self.send_raw(P.encode_id_frame(P.STDIN_EOF, ident))

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def exec(self, argv: list[str], *, stdin: bytes | None = b"", cwd: str = "/", env: dict | None = None,
                   timeout_ms: int = 0) -> tuple[int, dict[str, Any]]:
        """Start an exec; returns its id and the RESPONSE (stdin, if given, is fed in the background)."""
        ident = await self.request("exec", argv=argv, cwd=cwd, env=env or {}, timeout_ms=timeout_ms)
        if stdin is not None:
            self.spawn(self.feed(ident, stdin))
        return ident, await self.response(ident)

    async def outcome(self, ident: int) -> dict[str, Any]:
        """Everything an exec sends after its RESPONSE, up to and including EXIT."""
        out = {"stdout": bytearray(), "stderr": bytearray()}
        while True:
            kind, value = await self.event(ident)
            if kind == "exit":
                return {"stdout": bytes(out["stdout"]), "stderr": bytes(out["stderr"]), **value}
            out[kind] += value

    async def run(self, argv: list[str], **kwargs: Any) -> dict[str, Any]:
        ident, response = await self.exec(argv, **kwargs)
        assert response["ok"], response
        return await self.outcome(ident)

    async def data_call(self, op: str, **fields: Any) -> tuple[bytes, dict[str, Any]]:
        ident = await self.request(op, **fields)
        data = bytearray()
        while True:
            kind, value = await self.event(ident)
            if kind == "response":
                return bytes(data), value
            assert kind == "data"
            data += value


@pytest.fixture
async def guest(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = await GuestHost(workspace).start()
    yield host
    await host.aclose()


def _gone_or_zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


# -- exec -------------------------------------------------------------------------------------------------------


async def test_echo_stdout_stderr_and_exit_code(guest):
    result = await guest.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert result["stdout"] == b"out\n" and result["stderr"] == b"err\n"
    assert (result["exit_code"], result["signal"], result["timed_out"]) == (3, None, False)


async def test_cat_streams_more_stdin_than_the_window_back_unchanged(guest):
    data = os.urandom(3 * P.STDIN_WINDOW + 12345)
    result = await guest.run(["cat"], stdin=data)
    assert result["stdout"] == data and result["exit_code"] == 0


async def test_env_cwd_and_boot_env_reach_the_process(guest, tmp_path):
    result = await guest.run(["sh", "-c", 'echo "$FOO:$LC_ALL:$(pwd)"'], cwd=str(tmp_path), env={"FOO": "bar"})
    assert result["stdout"] == f"bar:C:{tmp_path}\n".encode()


async def test_a_program_that_cannot_start_gets_an_error_response(guest, tmp_path):
    _, missing = await guest.exec(["/nonexistent/program"])
    assert missing["ok"] is False and missing["error"]["code"] == "ENOENT"
    _, bad_cwd = await guest.exec(["true"], cwd=str(tmp_path / "nope"))
    assert bad_cwd["ok"] is False and bad_cwd["error"]["code"] == "ENOENT"
    pty = await guest.call("exec", argv=["true"], cwd="/", env={}, timeout_ms=0, pty=True)
    assert pty["ok"] is True  # pty execs are supported (e2e/test_pty_e2e.py)
    assert (await guest.call("ping"))["ok"] is True


async def test_sigint_stops_a_sleep(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    assert response["ok"] and response["pid"] > 0
    assert (await guest.call("signal", target=ident, signal=int(signal.SIGINT)))["ok"] is True
    result = await guest.outcome(ident)
    assert (result["exit_code"], result["signal"], result["timed_out"]) == (None, signal.SIGINT, False)
    late = await guest.call("signal", target=ident, signal=int(signal.SIGTERM))
    assert late["ok"] is False and late["error"]["code"] == "ESRCH"


async def test_timeout_kills_the_process_group(guest):
    ident, _ = await guest.exec(["sh", "-c", "sleep 1000 & sleep 1000; echo never"], stdin=None, timeout_ms=200)
    result = await guest.outcome(ident)
    assert result["timed_out"] is True and result["signal"] == signal.SIGKILL and result["stdout"] == b""


async def _stuck_on_stdin(guest: GuestHost) -> tuple[int, int, asyncio.Task[Any]]:
    """A process that never reads stdin while the host tries to send it 2 MB; returns once the host is blocked."""
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    feeder = guest.spawn(guest.feed(ident, b"x" * (2 * 1000 * 1000)))
    window = guest.windows[ident]
    async with guest.credit:
        await asyncio.wait_for(guest.credit.wait_for(lambda: window.available == 0), WAIT)
    assert not feeder.done()
    assert (await guest.call("ping"))["ok"] is True  # the request loop is not stuck behind stdin
    return ident, response["pid"], feeder


async def test_a_process_that_never_reads_stdin_is_stopped_by_signal(guest):
    ident, _, feeder = await _stuck_on_stdin(guest)
    assert (await guest.call("signal", target=ident, signal=int(signal.SIGTERM)))["ok"] is True
    result = await guest.outcome(ident)
    assert result["signal"] == signal.SIGTERM
    feeder.cancel()
    assert (await guest.call("ping"))["ok"] is True


async def test_a_process_that_never_reads_stdin_is_killed_when_the_channel_closes(guest):
    _, pid, feeder = await _stuck_on_stdin(guest)
    feeder.cancel()
    guest.writer.close()
    status, err = await guest.stop()
    assert status == 0, err
    assert _gone_or_zombie(pid)


async def test_stdin_for_a_process_that_exits_without_reading_it_is_dropped(guest):
    result = await guest.run(["true"], stdin=b"z" * (3 * P.STDIN_WINDOW))
    assert result["exit_code"] == 0
    assert (await guest.call("ping"))["ok"] is True


async def test_sigterm_to_the_guest_stops_it_and_its_processes(guest):
    _, response = await guest.exec(["sleep", "1000"], stdin=None)
    guest.proc.send_signal(signal.SIGTERM)
    status, err = await guest.stop()
    assert status == 0, err
    assert _gone_or_zombie(response["pid"])


async def test_many_concurrent_execs_keep_their_streams_apart(guest):
    async def one(n: int) -> None:
        result = await guest.run(["sh", "-c", 'read x; echo "$x-$N"; echo "e$N" >&2'], stdin=f"in{n}\n".encode(),
                                 env={"N": str(n)})
        assert result["stdout"] == f"in{n}-{n}\n".encode() and result["stderr"] == f"e{n}\n".encode()

    await asyncio.gather(*(one(n) for n in range(64)))


async def test_exec_limit_refuses_extra_execs(tmp_path):
    host = await GuestHost(tmp_path, limits={"exec_timeout_ms": 0, "max_execs": 2}).start()
    try:
        first, _ = await host.exec(["sleep", "1000"], stdin=None)
        second, _ = await host.exec(["sleep", "1000"], stdin=None)
        _, third = await host.exec(["true"])
        assert third["ok"] is False and third["error"]["code"] == "EAGAIN"
        for ident in (first, second):
            await host.call("signal", target=ident, signal=9)
            await host.outcome(ident)
        assert (await host.run(["true"]))["exit_code"] == 0
    finally:
        await host.aclose()


async def test_boot_limit_caps_the_timeout(tmp_path):
    host = await GuestHost(tmp_path, limits={"exec_timeout_ms": 200, "max_execs": 4}).start()
    try:
        result = await host.run(["sleep", "1000"], stdin=None, timeout_ms=0)
        assert result["timed_out"] is True
    finally:
        await host.aclose()


async def test_a_background_grandchild_holding_the_pipes_does_not_hang_exit(guest):
    result = await guest.run(["sh", "-c", "sleep 1000 & echo started"])
    assert result["stdout"] == b"started\n" and result["exit_code"] == 0
    status, err = await _shutdown(guest)
    assert status == 0, err


async def test_large_output_arrives_in_order_in_bounded_frames(guest):
    result = await guest.run(["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; echo; seq 1 20000 >&2"])
    assert result["stdout"] == b"a" * 3_000_000 + b"\n"
    assert result["stderr"] == "".join(f"{n}\n" for n in range(1, 20001)).encode()


# -- files ------------------------------------------------------------------------------------------------------


@pytest.fixture
async def files_guest(tmp_path):
    ws = tmp_path / "ws"
    (ws / "dir").mkdir(parents=True)
    (ws / "dir" / "a.txt").write_bytes(b"hello world")
    (ws / "big").write_bytes(bytes(range(256)) * 4096)
    (ws / "link").symlink_to("dir/a.txt")
    (ws / "abs").symlink_to(ws / "dir" / "a.txt")
    (ws / "escape").symlink_to("../outside")
    (tmp_path / "outside").write_text("secret")
    os.mkfifo(ws / "fifo")
    host = await GuestHost(ws).start()
    yield host, ws
    await host.aclose()


async def test_files_reads_bounded_and_reports_truncation(files_guest):
    host, ws = files_guest
    data, response = await host.data_call("files", path="dir/a.txt", max_bytes=1000)
    assert data == b"hello world" and response == {"id": response["id"], "ok": True, "size": 11, "truncated": False}
    data, response = await host.data_call("files", path="big", max_bytes=300_000)
    assert data == (bytes(range(256)) * 4096)[:300_000] and response["truncated"] is True
    data, response = await host.data_call("files", path=str(ws / "link"), max_bytes=5)
    assert data == b"hello" and response["truncated"] is True
    data, _ = await host.data_call("files", path="abs", max_bytes=100)
    assert data == b"hello world"


@pytest.mark.parametrize(("path", "code"), [
    ("escape", "OUTSIDE_WORKSPACE"), ("../outside", "OUTSIDE_WORKSPACE"), ("/etc/passwd", "OUTSIDE_WORKSPACE"),
    ("fifo", "NOT_REGULAR"), ("dir", "EISDIR"), ("missing", "ENOENT"), ("dir/a.txt/x", "ENOTDIR"),
])
async def test_files_refuses_what_is_not_a_regular_file_in_the_workspace(files_guest, path, code):
    host, _ = files_guest
    data, response = await host.data_call("files", path=path, max_bytes=100)
    assert data == b"" and response["ok"] is False and response["error"]["code"] == code


# -- shutdown and errors ----------------------------------------------------------------------------------------


async def _shutdown(host: GuestHost) -> tuple[int, str]:
    response = await host.call("shutdown")
    assert response["ok"] is True
    return await host.stop()


async def test_shutdown_ends_running_execs_then_the_guest(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    shutdown = await guest.request("shutdown")
    result = await guest.outcome(ident)
    assert result["signal"] == signal.SIGTERM
    assert (await guest.response(shutdown))["ok"] is True
    status, err = await guest.stop()
    assert status == 0, err
    assert _gone_or_zombie(response["pid"])


async def test_a_bad_boot_config_stops_the_guest_at_once(tmp_path):
    host = await GuestHost(tmp_path, raw_boot=b'{"box_id": "x", "box_id": "y"}').start(connect=False)
    status, err = await host.stop()
    assert status == 1 and "duplicate JSON key" in err


def _frame(ftype: int, payload: bytes) -> bytes:
    return bytes([ftype]) + len(payload).to_bytes(4, "big") + payload


MALFORMED = {
    "unknown type": _frame(99, b"{}"),
    "guest-only type": _frame(P.STDOUT, b"\0\0\0\1x"),
    "oversize length": bytes([P.REQUEST]) + (P.MAX_PAYLOAD + 1).to_bytes(4, "big"),
    "not json": _frame(P.REQUEST, b"{nope"),
    "not an object": _frame(P.REQUEST, b"[1,2]"),
    "float": _frame(P.REQUEST, b'{"id":1.5,"op":"ping"}'),
    "unknown op": _frame(P.REQUEST, b'{"id":1,"op":"reboot"}'),
    "unknown field": _frame(P.REQUEST, b'{"id":1,"op":"ping","x":1}'),
    "stdin for no exec": _frame(P.STDIN, b"\0\0\0\7data"),
    "short STDIN_EOF": _frame(P.STDIN_EOF, b"\0\0"),
    "cut in the middle": _frame(P.REQUEST, b'{"id":1,"op":"ping"}')[:9],
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
async def test_malformed_frames_make_the_guest_exit_with_an_error(guest, name):
    await guest.send_raw(MALFORMED[name])
    if name == "cut in the middle":
        guest.writer.close()
    status, err = await guest.stop()
    assert status == 2 and "protocol error" in err, err


async def test_a_request_id_in_use_is_a_protocol_error(guest):
    ident, _ = await guest.exec(["sleep", "1000"], stdin=None)
    await guest.send_raw(P.encode_json_frame(P.REQUEST, {"id": ident, "op": "ping"}))
    status, err = await guest.stop()
    assert status == 2 and "already in use" in err


async def test_stdin_beyond_the_window_is_a_protocol_error(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    with contextlib.suppress(ConnectionError):  # the guest hangs up as soon as it sees the overflow
        for _ in range(4):  # 4 MiB with no regard for credit: far more than the pipe and the window hold
            await guest.send_raw(P.encode_id_frame(P.STDIN, ident, b"y" * P.MAX_ID_DATA))
    status, err = await guest.stop()
    assert status == 2 and "window" in err
    assert _gone_or_zombie(response["pid"])


# -- a real overlay ---------------------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git" or Path(dirpath) != root]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", path.read_bytes(), bool(st.st_mode & stat.S_IXUSR))
    return found


def _git_apply(base: Path, patch: bytes, into: Path) -> None:
    shutil.copytree(base, into, symlinks=True)
    home = into.parent / "emptyhome"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    subprocess.run(["git", "init", "-q", str(into)], check=True, env=env)
    if patch:
        subprocess.run(["git", "apply", "-"], input=patch, cwd=into, check=True, env=env)


@pytest.fixture
def overlay(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("overlay mounts need root")
    lower, upper, work, merged = (tmp_path / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    (lower / "src").mkdir()
    (lower / "src" / "main.py").write_text("print('hi')\n")
    (lower / "gone").mkdir()
    (lower / "gone" / "x").write_text("x\n")
    (lower / "remade").mkdir()
    (lower / "remade" / "old").write_text("old\n")
    (lower / "tool.sh").write_text("#!/bin/sh\n")
    (lower / "doomed.txt").write_text("bye\n")
    (lower / "link").symlink_to("src/main.py")
    opts = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], check=True)
    yield lower, upper, merged
    subprocess.run(["umount", str(merged)], check=False)


async def test_diff_over_a_real_overlay_reproduces_the_workspace(overlay, tmp_path):
    lower, upper, merged = overlay
    host = await GuestHost(merged, base_dir=lower, upper_dir=upper).start()
    try:
        script = (
            "set -e; printf 'print(\"bye\")' > src/main.py; chmod +x tool.sh; rm -r gone doomed.txt;"
            "rm -r remade; mkdir remade; echo new > remade/new; ln -sfn tool.sh link;"
            "printf 'bin\\000ary' > 'data file.bin'; mkdir -p 'ünï/dir'; : > 'ünï/dir/empty'"
        )
        assert (await host.run(["sh", "-c", script], cwd=str(merged)))["exit_code"] == 0
        patch, response = await host.data_call("diff")
        assert response["ok"] is True and response["size"] == len(patch)
        assert response["sha256"] == "sha256:" + hashlib.sha256(patch).hexdigest()
        changes = {(f["path"], f["change"]) for f in response["files"]}
        assert ("tool.sh", "mode") in changes and ("remade/old", "deleted") in changes
        assert ("gone/x", "deleted") in changes and ("data file.bin", "added") in changes
        assert any(f["binary"] for f in response["files"] if f["path"] == "data file.bin")
        _git_apply(lower, patch, tmp_path / "applied")
        assert _tree(tmp_path / "applied") == _tree(merged)
        status, err = await _shutdown(host)
        assert status == 0, err
    finally:
        await host.aclose()


# -- PID 1 ------------------------------------------------------------------------------------------------------

# Waits (inside the box) until no process but this shell has PID 1 as its parent: every orphan has ended and
# been reaped. A guest that does not reap leaves them as zombies and the loop gives up.
ORPHAN_CHECK = r"""
me=$$
for i in $(seq 1 400); do
  left=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v me="$me" '$4 == 1 && $1 != me' | wc -l)
  zombies=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == "Z"' | wc -l)
  [ "$left" -eq 0 ] && [ "$zombies" -eq 0 ] && { echo clean; exit 0; }
  sleep 0.05
done
cat /proc/[0-9]*/stat 2>/dev/null; exit 1
"""


@needs_root
async def test_as_pid_1_the_guest_reaps_orphans(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    host = await GuestHost(tmp_path, prefix=("unshare", "--pid", "--fork", "--kill-child", "--mount-proc")).start()
    try:
        parent = await host.run(["sh", "-c", "echo $PPID"])
        assert parent["stdout"] == b"1\n"  # the guest is PID 1 of the namespace
        orphans = "for i in 1 2 3 4 5 6 7 8; do (sh -c 'exit 7' &) ; (sleep 0.2 &) ; done; echo made"
        assert (await host.run(["sh", "-c", orphans]))["stdout"] == b"made\n"
        check = await host.run(["sh", "-c", ORPHAN_CHECK])
        assert check["stdout"] == b"clean\n", check
        status, err = await _shutdown(host)
        assert status == 0, err
    finally:
        await host.aclose()
