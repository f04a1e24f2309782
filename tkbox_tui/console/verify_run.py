"""Run the verifier on a bundle as its own process, the way an operator would (``tkbox verify B --trust T --json``),
with a time limit and bounded output, and read its report strictly (``verify_result``).

The console does not import the verifier (it reaches the daemon's code only through the wire schema): it runs
``sys.executable -m tkbox_tui.cli.main verify …``, the ``tkbox`` command's own entry point, so the report shown is
exactly what ``tkbox verify`` says. The process is killed at the time limit; whatever goes wrong (it cannot start,
it runs too long, it prints something that is not a report) is a ``VerifierFailed`` naming what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path

from .verify_result import MAX_OUTPUT, VerifyOutputError, VerifyResult, parse_verify_output

VERIFY_TIMEOUT = 300.0
"""Seconds the verifier may take (it checks about 20,000 records a second per core: docs/verify.md)."""
STDERR_SHOWN = 4096
"""Bytes of the verifier's stderr kept for the message when it gives no report."""


class VerifierFailed(RuntimeError):
    """The verifier gave no report the console can read; the message says why (box bytes in it are escaped by the
    screen that shows it)."""


def default_trust_path(bundle: Path) -> Path:
    """``run.tkb`` → ``run.trust.json`` beside it (any other name gets ``.trust.json`` appended): the rule of
    ``tkbox export`` (``tkbox_tui/cli/export_command.py``; a test checks they agree)."""
    stem = bundle.name[:-4] if bundle.name.endswith(".tkb") and len(bundle.name) > 4 else bundle.name
    return bundle.with_name(f"{stem}.trust.json")


def verifier_argv(bundle: Path, trust: Path) -> list[str]:
    return [sys.executable, "-m", "tkbox_tui.cli.main", "verify", str(bundle), "--trust", str(trust), "--json"]


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``stream`` (one more tells the caller it had more), then drain the rest."""
    data = bytearray()
    while chunk := await stream.read(65536):
        if len(data) <= limit:
            data += chunk[:limit + 1 - len(data)]
    return bytes(data)


async def run_verifier(bundle: Path, trust: Path, timeout: float = VERIFY_TIMEOUT) -> VerifyResult:
    """The verifier's report on ``bundle`` against ``trust``; ``VerifierFailed`` when it gives none."""
    try:
        process = await asyncio.create_subprocess_exec(
            *verifier_argv(bundle, trust), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise VerifierFailed(f"the verifier could not start: {exc.strerror or exc}") from None
    assert process.stdout is not None and process.stderr is not None
    try:
        stdout, stderr, status = await asyncio.wait_for(
            asyncio.gather(_read_bounded(process.stdout, MAX_OUTPUT), _read_bounded(process.stderr, STDERR_SHOWN),
                           process.wait()), timeout)
    except TimeoutError:
        raise VerifierFailed(f"the verifier took more than {timeout:g} s and was stopped") from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    try:
        return parse_verify_output(stdout, status)
    except VerifyOutputError as exc:
        said = _refusal(stdout) or stderr[:STDERR_SHOWN].decode("utf-8", "replace").strip()
        raise VerifierFailed(f"the verifier (exit {status}) gave no report: {exc}"
                             + (f"; it said: {said}" if said else "")) from None


def _refusal(stdout: bytes) -> str:
    """The message of a ``{"error": {"message": …}}`` the CLI prints for a refusal, or ``""``."""
    try:
        document = json.loads(stdout[:MAX_OUTPUT])
    except (ValueError, RecursionError):
        return ""
    error = document.get("error") if isinstance(document, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message[:STDERR_SHOWN] if isinstance(message, str) else ""
