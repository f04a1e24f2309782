"""The scripted attack suite: every attempt of ``escape_attempts.ATTEMPTS`` run from inside a real box, on both
backends, through the real signer, daemon and ``tkbox`` command; each must be stopped and, where the table says
so, recorded.

The attempts a box's job makes on its own run in one command per box (``escape_probe.py`` prints one result per
attempt); those that need the host — a door's refusal, a record after the attack, a client that stops reading, a
patch full of terminal escapes, a command that eats its box's memory — are driven by ``HOST_RUNNERS`` below. The
assertions read the table; ``docs/box-isolation.md`` shows it (``python -m e2e.escape_attempts``).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.box_lab import require_backend
from e2e.escape_attempts import ATTEMPTS, LIMITS, Attempt
from e2e.escape_lab import BOUND_S, TKBOX, EscapeRig, Outcome, checked, run_tkbox, tkbox_env

pytestmark = pytest.mark.e2e

BACKENDS = ("bwrap", "ns")
FLOOD_BYTES = 64 << 20  # beyond every buffer between the box and the client
STALLED_COMMAND_S = 15  # how long the other command may take while a client stalls
CONTROL_BYTES = set(range(0x20)) - {0x09, 0x0A} | {0x7F}  # C0 controls but tab and newline, and DEL


@pytest.fixture(scope="module")
def signer_dir() -> Iterator[Path]:
    """The module's signer (both backends' daemons record into it), in a short path: sockets are limited."""
    root = Path(tempfile.mkdtemp(prefix="tke-", dir="/tmp"))
    os.chmod(root, 0o755)
    signer = root / "signer"
    env = tkbox_env(root, signer)
    checked(run_tkbox(env, "signer", "up", cwd=root))
    try:
        yield signer
    finally:
        run_tkbox(env, "signer", "down", cwd=root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=BACKENDS)
def rig(request: pytest.FixtureRequest, signer_dir: Path) -> Iterator[EscapeRig]:
    require_backend(request.param)
    root = Path(tempfile.mkdtemp(prefix=f"tke-{request.param}-", dir="/tmp"))
    os.chmod(root, 0o755)  # like a real checkout's parent: readable by others, so only the box's root keeps it out
    rig = EscapeRig(request.param, root, signer_dir)
    try:
        rig.start()
        yield rig
    finally:
        rig.stop()
        shutil.rmtree(root, ignore_errors=True)


BATCHED = [attempt for attempt in ATTEMPTS if attempt.runner != "host"]
HOSTED = [attempt for attempt in ATTEMPTS if attempt.runner == "host"]


@pytest.mark.parametrize("attempt", BATCHED, ids=lambda attempt: attempt.id)
def test_an_attempt_from_inside_the_box_is_stopped(rig: EscapeRig, attempt: Attempt) -> None:
    batch = rig.batch(attempt.runner)
    stopped = batch.results.get(attempt.id) in attempt.expect
    assert stopped, f"{batch.explain(attempt.id)}; expected {' or '.join(attempt.expect)}"
    if attempt.id == "peer-kill-all":
        assert rig.peer_alive_after_main, "the other box's listener died when this box killed all it could"


@pytest.mark.parametrize("attempt", HOSTED, ids=lambda attempt: attempt.id)
def test_a_host_driven_attempt_is_stopped_and_recorded(rig: EscapeRig, attempt: Attempt) -> None:
    outcome = HOST_RUNNERS[attempt.id](rig)
    stopped = outcome.result in attempt.expect
    assert stopped, f"{attempt.id}: got {outcome.result!r}, expected {' or '.join(attempt.expect)}; {outcome.detail}"
    if attempt.record is not None:
        rig.assert_recorded(outcome, attempt.record)


# ---- host-driven attempts ---------------------------------------------------------------------------------------


def _exit_token(result: subprocess.CompletedProcess[bytes]) -> str:
    return f"exit:{result.returncode}"


def _detail(result: subprocess.CompletedProcess[bytes]) -> str:
    return f"stdout {result.stdout[-500:]!r} stderr {result.stderr[-1000:]!r}"


def _door(*argv: str) -> Callable[[EscapeRig], Outcome]:
    """A command the signer must refuse: ``tkbox exec`` exits 126 and nothing runs."""

    def run(rig: EscapeRig) -> Outcome:
        before = rig.mark("main")
        result = rig.exec("main", *argv)
        return Outcome(_exit_token(result), rig.box("main"), before, detail=_detail(result))

    return run


def _guest_box_survives(rig: EscapeRig) -> Outcome:
    batch = rig.batch("guest")
    info = rig.info("guest")
    bad = [event["kind"] for event in rig.events("guest") if event["kind"] in ("guest.protocol_error", "box.failed")]
    result = "running" if info["state"] == "running" and not bad else f"{info['state']}: {info['reason']!r} {bad}"
    return Outcome(result, rig.box("guest"), detail=f"batch exited {batch.returncode}")


def _guest_record_intact(rig: EscapeRig) -> Outcome:
    rig.batch("guest")  # the attacks come first
    before = rig.mark("guest")
    result = rig.exec("guest", "sh", "-c", "exit 7")
    return Outcome(_exit_token(result), rig.box("guest"), before, detail=_detail(result))


def _memory_hog(rig: EscapeRig) -> Outcome:
    before = rig.mark("limits")
    result = rig.exec("limits", *rig.probe_argv("hog", str(2 * LIMITS["memory"])))
    state = rig.info("limits")["state"]
    token = _exit_token(result) if state == "running" else f"box {state}"
    return Outcome(token, rig.box("limits"), before, detail=_detail(result))


def _exec_timeout(rig: EscapeRig) -> Outcome:
    before = rig.mark("main")
    result = rig.exec("main", "sleep", "60", options=("--timeout", "1"))
    return Outcome(_exit_token(result), rig.box("main"), before, detail=_detail(result))


def _fill_tmp(rig: EscapeRig) -> Outcome:
    """Stopped at the box's memory limit, however: the writer refused or killed, or the box failed (recorded);
    the main box runs on."""
    before = rig.mark("fill")
    result = rig.exec("fill", *rig.probe_argv("fill", str(2 * LIMITS["memory"])))
    state = rig.info("fill")["state"]
    failed = None
    if state != "running":  # on its way down: wait for the end to be recorded
        failed = rig.wait_for_event("fill", {"box.failed"}, before.events)
    writer_stopped = state == "running" and (result.stdout.startswith(b"refused ") or result.returncode == 137)
    others_run = rig.info("main")["state"] == "running"
    if (writer_stopped or failed is not None) and others_run:
        token = "bounded"
    elif b"written" in result.stdout:
        token = "unbounded"
    else:
        token = f"unclear: box {state}, box.failed {failed}, main running {others_run}"
    return Outcome(token, rig.box("fill"), before, detail=_detail(result))


def _slow_reader(rig: EscapeRig) -> Outcome:
    """The client stops reading a flood; another command must still run; then every byte must arrive."""
    box = rig.box("main")
    before = rig.mark("main")
    argv = ["head", "-c", str(FLOOD_BYTES), "/dev/zero"]
    flood = subprocess.Popen([TKBOX, "exec", box.name, "--", *argv], env=rig.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=rig.root)
    try:
        first = _read_some(flood)  # the flood runs; from here the reader stalls
        try:
            other = rig.exec("main", "true", timeout=STALLED_COMMAND_S)
            other_token = _exit_token(other)
        except subprocess.TimeoutExpired:
            other_token = "hung"
        received = len(first) + _drain(flood)
        returncode = flood.wait(BOUND_S)
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()
    info = rig.info("main")
    errors = [event for event in rig.events("main", before.events) if event["kind"] == "guest.protocol_error"]
    complete = (other_token == "exit:0" and received == FLOOD_BYTES and returncode == 0
                and info["state"] == "running" and not errors)
    detail = (f"other command {other_token}, received {received} of {FLOOD_BYTES}, flood exited {returncode}, "
              f"box {info['state']}, protocol errors {errors}")
    return Outcome("complete" if complete else "failed", box, before, command=" ".join(argv), detail=detail)


def _read_some(process: subprocess.Popen[bytes]) -> bytes:
    """The first output of ``process`` (b"" if none comes within the bound), proof that it runs."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout.fileno()], [], [], BOUND_S)
    return os.read(process.stdout.fileno(), 1 << 16) if ready else b""


def _drain(process: subprocess.Popen[bytes]) -> int:
    """Read the rest of ``process``'s stdout until it closes (within the bound), counting bytes."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    total = 0
    deadline = time.monotonic() + BOUND_S
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], remaining)
        chunk = os.read(fd, 1 << 20) if ready else b""
        if not chunk:
            break
        total += len(chunk)
    return total


def _diff_escapes(rig: EscapeRig) -> Outcome:
    box = rig.box("main")
    checked(rig.exec("main", *rig.probe_argv("escapes")))
    result = checked(run_tkbox(rig.env, "diff", box.name, cwd=rig.root))
    raw = sorted({f"0x{byte:02x}" for byte in result.stdout if byte in CONTROL_BYTES})
    c1 = any(0x80 <= ord(char) <= 0x9F for char in result.stdout.decode("utf-8", errors="replace"))
    shown = b"esc-" in result.stdout and b"clear:" in result.stdout
    token = "escaped" if shown and not raw and not c1 else f"raw control bytes {raw} c1 {c1} shown {shown}"
    return Outcome(token, box, detail=repr(result.stdout[-400:]))


HOST_RUNNERS: dict[str, Callable[[EscapeRig], Outcome]] = {
    "guest-box-survives": _guest_box_survives,
    "guest-record-intact": _guest_record_intact,
    "door-sudo": _door("sudo", "id"),
    "door-su": _door("su", "-c", "id"),
    "door-shadow": _door("cat", "/etc/shadow"),
    "door-kill-signer": _door("pkill", "-f", "tkbox signer"),
    "res-memory-hog": _memory_hog,
    "res-exec-timeout": _exec_timeout,
    "res-fill-tmp": _fill_tmp,
    "cli-slow-reader": _slow_reader,
    "cli-diff-escapes": _diff_escapes,
}


def test_every_host_driven_attempt_has_a_runner() -> None:
    assert {attempt.id for attempt in HOSTED} == set(HOST_RUNNERS)
