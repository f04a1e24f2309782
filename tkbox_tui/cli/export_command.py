"""``tkbox export BOX -o run.tkb``: a stopped box's run as a bundle and the trust file beside it, through the daemon.

The daemon closes the box's run if it is still open (refusing a live box, and a run an earlier daemon left open),
and streams the bundle from the signer; this command checks its size and SHA-256 against what the daemon
announced, asks for the signer's trust document, and writes both files all or nothing: each into a temporary file
in the target's directory, renamed into place only once complete (an existing file is refused unless ``--force``).
Ctrl+C, or any failure, leaves no partial file. On a terminal, stderr shows the bytes received of the total.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from tkbox_daemon.wire import RunExport

from ..terminal_text import safe_text
from .daemon_refusals import daemon_client
from .report import CliError, CliParser

PROGRESS_PERIOD = 0.1  # seconds between progress lines redrawn on the terminal


def default_trust_path(bundle: Path) -> Path:
    """``run.tkb`` → ``run.trust.json`` beside it (any other name gets ``.trust.json`` appended)."""
    stem = bundle.name[:-4] if bundle.name.endswith(".tkb") and len(bundle.name) > 4 else bundle.name
    return bundle.with_name(f"{stem}.trust.json")


def verify_command(bundle: Path, trust: Path) -> str:
    """The exact command that verifies what was written (``tkbox verify BUNDLE --trust TRUST``)."""
    return f"tkbox verify {shlex.quote(str(bundle))} --trust {shlex.quote(str(trust))}"


class NewFile:
    """A file written beside ``target`` and put in its place only by ``commit``; otherwise removed on leaving."""

    def __init__(self, target: Path, *, replace: bool) -> None:
        self.target = target
        self.replace = replace
        self._temp: str | None = None
        self._handle: IO[bytes] | None = None

    def __enter__(self) -> NewFile:
        fd, self._temp = tempfile.mkstemp(prefix=f".{self.target.name}.", suffix=".part", dir=self.target.parent)
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # as the operator's other files: the bundle holds only public evidence
        self._handle = os.fdopen(fd, "wb")
        return self

    def write(self, data: bytes) -> None:
        assert self._handle is not None
        self._handle.write(data)

    def commit(self) -> None:
        assert self._handle is not None and self._temp is not None
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        if self.replace:
            os.replace(self._temp, self.target)
        else:
            _place_new(self._temp, self.target)
        self._temp = None
        with contextlib.suppress(OSError):
            directory = os.open(self.target.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
        if self._temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temp)


def _place_new(temp: str, target: Path) -> None:
    """Move ``temp`` to ``target`` only if nothing is there: a hard link fails rather than replace (on a file
    system without hard links: check, then rename)."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise _exists(target) from None
    except OSError:
        if os.path.lexists(target):
            raise _exists(target) from None
        os.rename(temp, target)
        return
    os.unlink(temp)


def _exists(path: Path) -> CliError:
    return CliError("output_exists", f"{path} exists already", "choose another path, or replace it with --force")


def check_targets(bundle: Path, trust: Path, force: bool) -> None:
    """Refuse before asking the daemon anything: a missing directory, a directory in the way, the same path twice,
    an existing file without ``--force``."""
    if bundle.resolve() == trust.resolve():
        raise CliError("usage", f"the bundle and the trust file are both {bundle}", "give --trust another path")
    for path in (bundle, trust):
        if not path.parent.is_dir():
            raise CliError("bad_output", f"{path.parent} is not a directory", "create it, or write elsewhere")
        if path.is_dir():
            raise CliError("bad_output", f"{path} is a directory", "name a file in it, e.g. -o DIR/run.tkb")
        if os.path.lexists(path) and not force:
            raise _exists(path)


class Progress:
    """``exporting BOX: 1.2 MiB of 3.4 MiB`` redrawn on a terminal's stderr, at most every ``PROGRESS_PERIOD``."""

    def __init__(self, box: str, stream: IO[str]) -> None:
        self.box = safe_text(box)
        self.stream = stream
        self._shown_at = 0.0
        self._shown = False

    def __call__(self, received: int, total: int) -> None:
        now = time.monotonic()
        if received < total and now - self._shown_at < PROGRESS_PERIOD:
            return
        self._shown_at = now
        self._shown = True
        self.stream.write(f"\rexporting {self.box}: {_size(received)} of {_size(total)}\x1b[K")
        self.stream.flush()

    def end(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _trust_bytes(document: dict[str, Any]) -> bytes:
    from tkbox_daemon.evidence.trust import TrustError, parse_trust_document, trust_bytes

    try:
        parse_trust_document(document)  # written only if verify will read it
    except TrustError as exc:
        raise CliError("bad_reply", f"the daemon's trust document is not usable: {exc}") from None
    return trust_bytes(document)


async def export_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox export",
                       description="Export a stopped box's run as a .tkb bundle, with the trust file that pins the "
                                   "signer's keys beside it, and print the command that verifies them. The box's "
                                   "run is closed first if it is still open; a running box is refused (stop it "
                                   "first).")
    parser.add_argument("box", help="the box's name or id")
    parser.add_argument("-o", "--output", required=True, type=Path, help="the bundle to write (e.g. run.tkb)")
    parser.add_argument("--trust", type=Path, help="the trust file to write (default: beside the bundle, "
                                                   "run.trust.json for run.tkb)")
    parser.add_argument("--force", action="store_true", help="replace files that exist already")
    parser.add_json("print one JSON object: box, run_id, bundle, trust, size, sha256, verify")
    args = parser.parse_args(argv)
    bundle: Path = args.output
    trust: Path = args.trust or default_trust_path(bundle)
    check_targets(bundle, trust, args.force)
    progress = Progress(args.box, sys.stderr) if sys.stderr.isatty() and not args.json else None
    async with daemon_client(args.box) as client:
        with NewFile(bundle, replace=args.force) as bundle_file, NewFile(trust, replace=args.force) as trust_file:
            try:
                exported = await client.export_bundle(args.box, bundle_file.write, progress)
            finally:
                if progress is not None:
                    progress.end()
            trust_file.write(_trust_bytes(await client.trust()))
            bundle_file.commit()
            try:
                trust_file.commit()
            except BaseException:
                bundle.unlink(missing_ok=True)  # the one this command just wrote: both files or neither
                raise
    _print_result(args.box, exported, bundle, trust, args.json)
    return 0


def _print_result(box: str, exported: RunExport, bundle: Path, trust: Path, as_json: bool) -> None:
    command = verify_command(bundle, trust)
    if as_json:
        print(json.dumps({"box": box, "run_id": exported.run_id, "bundle": str(bundle), "trust": str(trust),
                          "size": exported.size, "sha256": exported.sha256, "verify": command}, sort_keys=True))
        return
    print(f"exported run {safe_text(exported.run_id)} of box {safe_text(box)}: {exported.size:,} bytes, "
          f"{exported.sha256}\n"
          f"  bundle  {safe_text(str(bundle))}\n"
          f"  trust   {safe_text(str(trust))}\n"
          f"verify with: {safe_text(command)}")


COMMANDS = {"export": export_main}
