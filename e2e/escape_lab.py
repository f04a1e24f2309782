"""The host side of the escape suite (``e2e/test_escapes.py``): one real daemon per backend, its boxes, the batches
of attempts run in them, and what was recorded.

Everything goes through the real ``tkbox`` command (the path an operator takes) with an environment of its own,
so the module's daemon and signer are independent of the per-test directories ``conftest.py`` sets. The boxes are
made once per backend, on first use, each for one purpose:

``main``   the kernel walls, the doors, the terminal (its checkout holds the probe, credentials and symlinks)
``peer``   the other box: a listener (abstract socket, loopback port, a /tmp file, a workspace file)
``guest``  the attacks on the guest agent, then the command whose record must be intact
``limits`` fork bomb, open files and the memory hog, with small limits
``fill``   filling /tmp, alone, since it may take its box down
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import watchfiles

from e2e.daemon_process import wait_for_daemon
from e2e.escape_attempts import LIMITS, Record, attempts_for
from e2e.signer_process import TKBOX
from tkbox_daemon.box.disk import release_all_below
from tkbox_daemon.boxes.layers import BoxLayers
from tkbox_daemon.config import DaemonPaths
from tkbox_daemon.signer.paths import SignerPaths

BOX_PYTHON = "/usr/bin/python3"  # Debian's interpreter, inside the box
PROBE = "/workspace/escape_probe.py"
PROBE_SOURCES = tuple(Path(__file__).resolve().with_name(name) for name in ("escape_probe.py",
                                                                          "escape_probe_calls.py"))
BOUND_S = 60  # no single command, wait or read of the suite may take longer
APPROVAL_WAIT_S = 2  # a held ask (sudo, su) that nobody here answers is refused after this, not after 120 s
ROLES = ("main", "peer", "guest", "limits", "fill")
BOX_OPTIONS: dict[str, tuple[str, ...]] = {
    "limits": ("--memory", f"{LIMITS['memory'] >> 20}M", "--pids", str(LIMITS["pids"])),
    "fill": ("--memory", f"{LIMITS['memory'] >> 20}M"),
}


def tkbox_env(root: Path, signer: Path) -> dict[str, str]:
    """An environment whose daemon lives under ``root`` and whose signer under ``signer`` (short socket paths)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("XDG_", "TKBOX_"))}
    env.update(HOME=str(root / "home"), XDG_STATE_HOME=str(root / "state"), XDG_RUNTIME_DIR=str(root / "run"),
               XDG_CONFIG_HOME=str(root / "config"), XDG_DATA_HOME=str(root / "data"),
               TKBOX_SIGNER_DATA_DIR=str(signer / "data"), TKBOX_SIGNER_RUNTIME_DIR=str(signer / "run"))
    return env


def run_tkbox(env: Mapping[str, str], *args: str, timeout: float = BOUND_S,
              cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """The real ``tkbox`` command with ``env``, an empty stdin and its output captured."""
    return subprocess.run([TKBOX, *args], input=b"", capture_output=True, env=dict(env), timeout=timeout, cwd=cwd)


def checked(result: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, result.args))} exited {result.returncode}:\n"
                             f"{result.stdout[-2000:]!r}\n{result.stderr[-2000:]!r}")
    return result


@dataclass
class Box:
    name: str
    id: str
    pid: int
    run_id: str


@dataclass
class Batch:
    """One command that ran a batch of attempts: each attempt's result token, and how the command ended."""

    results: dict[str, str]
    returncode: int
    stderr: bytes

    def explain(self, ident: str) -> str:
        return (f"{ident}: got {self.results.get(ident, 'no result')!r} (the batch exited {self.returncode}; "
                f"stderr {self.stderr[-1500:]!r})")


@dataclass(frozen=True)
class Mark:
    """Where the box's events and the signer's log stood before an attempt: its records come after."""

    events: int = 0
    signer: int = 0


@dataclass
class Outcome:
    """What a host-driven attempt came to: its result token, the box it ran in and the mark taken before it (its
    record is the first event of the record's kind after the mark)."""

    result: str
    box: Box
    mark: Mark = Mark()
    command: str | None = None  # when set, the record is the event of this decided command line
    detail: str = ""


@dataclass
class EscapeRig:
    """One backend: its daemon (sharing the module's signer), its boxes and the batches already run."""

    backend: str
    root: Path
    signer_dir: Path
    env: dict[str, str] = field(init=False)
    boxes: dict[str, Box] = field(default_factory=dict)
    batches: dict[str, Batch] = field(default_factory=dict)
    host_file: Path = field(init=False)
    host_abstract: str = field(init=False)
    _daemon: subprocess.Popen[bytes] | None = None
    _listener: socket.socket | None = None
    _peer: subprocess.Popen[bytes] | None = None
    peer_port: int = 0
    peer_alive_after_main: bool = False

    def __post_init__(self) -> None:
        self.env = tkbox_env(self.root, self.signer_dir)
        self.host_file = self.root / "host-only.txt"
        self.host_abstract = f"tkbox-escape-host-{os.urandom(4).hex()}"

    # ---- the daemon ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.host_file.write_text("host only\n")
        os.chmod(self.host_file, 0o644)  # readable by anyone on the host: only the box's root keeps it out
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind("\0" + self.host_abstract)
        self._listener.listen()
        log = self.root / "daemon.log"
        self._daemon = subprocess.Popen([TKBOX, "daemon", "--backend", self.backend,
                                         "--approval-wait", str(APPROVAL_WAIT_S)], env=self.env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.root)
        wait_for_daemon(self._daemon, log)
        self.make_boxes()

    def stop(self) -> None:
        if self._peer is not None:
            self.stop_peer_listener()
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.terminate()
            self._daemon.wait(BOUND_S)
        if self._listener is not None:
            self._listener.close()
        paths = DaemonPaths.from_env(self.env)
        release_all_below(paths.layers_root)  # a disk the daemon left mounted: deleting cannot unmount it
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)

    @property
    def daemon_paths(self) -> DaemonPaths:
        return DaemonPaths.from_env(self.env)

    # ---- boxes and commands ----------------------------------------------------------------------------------
    def make_boxes(self) -> None:
        """Every box of the suite, created at once (each ``tkbox run`` waits for its box's guest)."""
        runs = {role: subprocess.Popen([TKBOX, "run", "--name", role, "--workspace", str(self._checkout(role)),
                                        *BOX_OPTIONS.get(role, ()), "--json"], env=self.env, cwd=self.root,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for role in ROLES}
        outputs = {}
        for role, process in runs.items():
            try:
                outputs[role] = process.communicate(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                process.kill()
                outputs[role] = process.communicate()
        for role, (stdout, stderr) in outputs.items():
            assert runs[role].returncode == 0, f"tkbox run {role} exited {runs[role].returncode}: {stderr[-2000:]!r}"
            info = json.loads(stdout)
            assert info["state"] == "running" and info["backend"] == self.backend, info
            self.boxes[role] = Box(role, info["id"], info["pid"], info["run_id"])

    def box(self, role: str) -> Box:
        return self.boxes[role]

    def _checkout(self, role: str) -> Path:
        """A git checkout holding the probe, credential files the box must never see and symlinks out."""
        checkout = self.root / f"checkout-{role}"
        checkout.mkdir()
        env = {**self.env, "GIT_CONFIG_NOSYSTEM": "1"}
        subprocess.run(["git", "init", "-q", str(checkout)], check=True, env=env, timeout=BOUND_S)
        for source in PROBE_SOURCES:
            shutil.copy(source, checkout / source.name)
        (checkout / ".gitignore").write_text(".env\n")
        (checkout / ".env").write_text("API_KEY=do-not-copy\n")
        (checkout / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        (checkout / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
        (checkout / "escape-link").symlink_to(self.host_file)
        (checkout / "passwd-link").symlink_to("/etc/passwd")
        subprocess.run(["git", "-C", str(checkout), "add", "-A"], check=True, env=env, timeout=BOUND_S)
        return checkout

    def exec(self, role: str, *argv: str, options: tuple[str, ...] = (),
             timeout: float = BOUND_S) -> subprocess.CompletedProcess[bytes]:
        """``tkbox exec`` in the box with an empty stdin (streamed: the CLI's default for a pipe)."""
        return run_tkbox(self.env, "exec", *options, self.box(role).name, "--", *argv, timeout=timeout,
                         cwd=self.root)

    def probe_argv(self, *args: str) -> list[str]:
        return [BOX_PYTHON, "-I", "-S", PROBE, *args]

    def info(self, role: str) -> dict[str, Any]:
        boxes = json.loads(checked(run_tkbox(self.env, "ls", "--json", cwd=self.root)).stdout)
        return next(box for box in boxes if box["name"] == role)

    def events(self, role: str, after: int = 0) -> list[dict[str, Any]]:
        """The box's events after sequence ``after``, from the box's own events file (the daemon writes each event
        there before any client sees it)."""
        path = self.daemon_paths.box_state(self.box(role).id) / "events.jsonl"
        events = [json.loads(line) for line in path.read_bytes().splitlines()]
        return [event for event in events if event["seq"] > after]

    def wait_for_event(self, role: str, kinds: set[str], after: int) -> dict[str, Any] | None:
        """The first event of one of ``kinds`` after sequence ``after`` (following the stream), or None if none
        comes within the bound."""
        follower = subprocess.Popen([TKBOX, "events", self.box(role).name, "--follow", "--after", str(after),
                                     "--json"], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    cwd=self.root)
        deadline = time.monotonic() + BOUND_S
        lines = LineReader(follower)
        try:
            while line := lines.line(max(0.0, deadline - time.monotonic())):
                event = json.loads(line)
                if event["kind"] in kinds:
                    return event
            return None
        finally:
            follower.kill()
            follower.wait()

    def mark(self, role: str) -> Mark:
        signer = max((entry["seq"] for entry in self.signer_log()), default=0)
        return Mark(max((event["seq"] for event in self.events(role)), default=0), signer)

    # ---- batches ---------------------------------------------------------------------------------------------
    def batch(self, runner: str) -> Batch:
        """Run every attempt of ``runner`` in one command in that box (once), and parse one result per line."""
        if runner not in self.batches:
            args = self._probe_args(runner)
            request = json.dumps({"attempts": [attempt.id for attempt in attempts_for(runner)], "args": args})
            result = self.exec(runner, *self.probe_argv("run", request))
            self.batches[runner] = Batch(parse_results(result.stdout), result.returncode, result.stderr)
            if runner == "main":
                self.peer_alive_after_main = self._peer is not None and self._peer.poll() is None
        return self.batches[runner]

    def _probe_args(self, runner: str) -> dict[str, Any]:
        if runner == "limits":
            return {"fork_tries": 2 * LIMITS["pids"]}
        if runner != "main":
            return {}
        peer = self.box("peer")
        self.start_peer_listener()
        paths = self.daemon_paths
        return {"host_abstract": self.host_abstract, "host_secret": str(self.host_file), "peer_pid": peer.pid,
                "peer_port": self.peer_port,
                "peer_upper_file": str(BoxLayers(paths.box_layers(peer.id)).upper / "escape-peer-file"),
                "peer_agent_socket": str(paths.box_runtime(peer.id) / "agent.sock")}

    def start_peer_listener(self) -> None:
        """The peer box's listener, running until stop_peer_listener; returns once it said it is ready."""
        if self._peer is not None:
            return
        argv = [TKBOX, "exec", "--stdin", "stream", self.box("peer").name, "--", *self.probe_argv("listen")]
        self._peer = subprocess.Popen(argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, cwd=self.root)
        line = LineReader(self._peer).line(BOUND_S)
        assert line.startswith(b"ready "), f"the peer listener said {line!r}"
        self.peer_port = int(line.split()[1])

    def stop_peer_listener(self) -> int:
        assert self._peer is not None and self._peer.stdin is not None
        self._peer.stdin.close()
        try:
            return self._peer.wait(BOUND_S)
        finally:
            if self._peer.poll() is None:
                self._peer.kill()
                self._peer.wait()

    # ---- records ---------------------------------------------------------------------------------------------
    def assert_recorded(self, outcome: Outcome, record: Record) -> None:
        """The attempt's event (the first of its kind after the attempt began) holds the record's data, and the
        signer's record of the same decision (or of the run, for a refusal, which names no decision) holds the
        signer data."""
        events = [event for event in self.events(outcome.box.name, outcome.mark.events)
                  if event["kind"] == record.event
                  and outcome.command in (None, event["data"].get("command"))]
        assert events, f"no {record.event} event in box {outcome.box.name} after seq {outcome.mark.events}"
        event = events[0]
        assert _holds(event["data"], record.data), (event, record)
        if record.signer is None:
            return
        decision_id = event["data"].get("decision_id")

        def matches(entry: dict[str, Any]) -> bool:
            data = entry["data"]
            if entry["type"] != record.signer or entry.get("run_id") != outcome.box.run_id:
                return False
            if entry["seq"] <= outcome.mark.signer:
                return False
            if decision_id is not None and data.get("decision_id") != decision_id:
                return False
            return _holds(data, record.signer_data)

        found = self.wait_for_signer_record(matches)
        assert found is not None, f"no signer {record.signer} record holding {record.signer_data} " \
                                  f"for decision {decision_id} of run {outcome.box.run_id}"

    @property
    def signer_log_path(self) -> Path:
        return SignerPaths.from_env(self.env).store_dir / "log.jsonl"

    def signer_log(self) -> list[dict[str, Any]]:
        """Every record's event in the signer's log (the signer's own file: the test runs as root)."""
        return [json.loads(line)["event"] for line in self.signer_log_path.read_bytes().splitlines()]

    def wait_for_signer_record(self, matches: Any) -> dict[str, Any] | None:
        """The first record of the signer's log that ``matches``, waiting (bounded) for the log to grow: a
        completion is recorded in the background, just after the command's end reached the client."""
        log = self.signer_log_path

        def scan() -> dict[str, Any] | None:
            return next((entry for entry in self.signer_log() if matches(entry)), None)

        found = scan()
        if found is not None:
            return found
        deadline = time.monotonic() + BOUND_S
        # Each change of the log wakes us; the timeout only re-checks for a change made before the watch began.
        for _ in watchfiles.watch(log, rust_timeout=500, yield_on_timeout=True, debounce=50, step=10):
            found = scan()
            if found is not None or time.monotonic() > deadline:
                return found
        return None


def _holds(data: Mapping[str, Any], wanted: Mapping[str, object]) -> bool:
    return all(data.get(key) == value for key, value in wanted.items())


def parse_results(output: bytes) -> dict[str, str]:
    """The probe's result lines, ``{"id": str, "result": str}`` each; anything else in the box's output (a crash,
    garbage) is no result, so the attempt it was meant for fails with "no result". A later line for the same id
    wins. Never raises."""
    results: dict[str, str] = {}
    for line in output.splitlines():
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
            continue
        if isinstance(item, dict) and isinstance(item.get("id"), str) and isinstance(item.get("result"), str):
            results[item["id"]] = item["result"]
    return results


class LineReader:
    """Lines of a process's stdout, each read within a deadline (select, never a blocking read)."""

    MAX_LINE = 1 << 20

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        self.buffer = b""

    def line(self, timeout: float) -> bytes:
        """The next line, or b"" if the process closed its stdout or said nothing more within ``timeout``."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer and len(self.buffer) < self.MAX_LINE:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return b""
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return b""
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line
