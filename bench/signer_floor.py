"""The floor under a durable decision: the work every decide must do, each part timed alone, back to back, in this
process (CPU time), with no socket, event loop, store or client around it.

    .venv/bin/python bench/signer_floor.py [--decisions 4000]

The parts are the signer's own functions, called as ``SignerService._decide`` calls them for the commands
``bench/signer.py`` sends (``pytest -q tests/test_N.py``, each seen once): parse the request line, check it against
the RPC schema, the args' canonical bytes and the request MAC, the policy's verdict, the args commitment (its salt
included), the record built, signed and chained, the durable tree, the reply's bytes. Their sum is what one signer
process spends per decision before any server, fsync or client: 1 s divided by it bounds the decisions per second
that one process can reach on one core however the rest is written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

from tkbox_daemon import strictjson  # noqa: E402
from tkbox_daemon.evidence import merkle  # noqa: E402
from tkbox_daemon.evidence.chain import LogWriter  # noqa: E402
from tkbox_daemon.policy import PolicyContext, evaluate, load_pack  # noqa: E402
from tkbox_daemon.signer import commitments  # noqa: E402
from tkbox_daemon.signer.keys import load_or_create  # noqa: E402
from tkbox_daemon.signer.paths import SignerPaths  # noqa: E402
from tkbox_daemon.signer.rpc_schema import MAX_LINE_BYTES, validate  # noqa: E402
from tkbox_daemon.signer.server import encode_reply  # noqa: E402
from tkbox_daemon.signer.state import reply_from_record  # noqa: E402

RUN_ID = "run-" + "a" * 24


def decision_floor(count: int) -> list[tuple[str, float]]:
    """(part, CPU µs per decision) for ``count`` distinct decides, each part over all of them in turn."""
    base = Path(tempfile.mkdtemp(prefix="tkfloor-"))
    paths = SignerPaths(base / "data", base / "run")
    paths.ensure()
    keys = load_or_create(paths.keys_dir)
    pack = load_pack("default", PolicyContext(str(paths.data_dir), str(paths.runtime_dir), os.getpid()))
    lines = [json.dumps({"method": "decide", "request_id": f"req-{n:032x}", "run_id": RUN_ID, "run_token": "t" * 120,
                         "tool": "Bash", "args": {"command": f"pytest -q tests/test_{n}.py"}}).encode()
             for n in range(count)]
    parts: list[tuple[str, float]] = []

    def timed(part: str, work: Callable[[], list[Any]]) -> list[Any]:
        start = time.process_time()
        out = work()
        parts.append((part, (time.process_time() - start) / count * 1e6))
        return out

    requests = timed("parse the request line", lambda: [strictjson.loads_object(line, max_bytes=MAX_LINE_BYTES)
                                                       for line in lines])
    timed("check it against the RPC schema", lambda: [validate(request) for request in requests])
    encoded = timed("the args' canonical bytes", lambda: [strictjson.canonical(r["args"]) for r in requests])
    timed("the request MAC", lambda: [
        keys.salt_mac.digest(b"request:" + strictjson.canonical_object(
            {k: v for k, v in request.items() if k != "run_token"}, {"args": args}))
        for request, args in zip(requests, encoded, strict=True)])
    verdicts = timed("the policy's verdict", lambda: [evaluate(pack, "Bash", r["args"]) for r in requests])
    commits = timed("the args commitment and its salt", lambda: [
        commitments.commit(keys.salt(f"dec-{n:016x}"), {"tool": "Bash", "args": request["args"]}, {"args": args})
        for n, (request, args) in enumerate(zip(requests, encoded, strict=True))])
    writer = LogWriter(keys.log_id, keys.record_key)

    def build() -> list[Any]:
        records = []
        for n, (verdict, commitment) in enumerate(zip(verdicts, commits, strict=True)):
            data = {"decision_id": f"dec-{n:016x}", "tool": "Bash", "tool_class": verdict.tool_class,
                    "verdict": verdict.verdict, "rule_ids": list(verdict.rule_ids), "reason": verdict.reason,
                    "args": commitment, "request_mac": "0" * 32}
            record = writer.build(RUN_ID, "policy.decision", data, identity="uid:0", request_id=f"req-{n:032x}")
            writer.advance(record)
            records.append(record)
        return records

    records = timed("the record built, signed and chained", build)
    tree = merkle.CompactRange()
    timed("the durable tree", lambda: [tree.append(record.leaf()) for record in records])
    timed("the reply and its bytes", lambda: [encode_reply(reply_from_record(record)) for record in records])
    shutil.rmtree(base, ignore_errors=True)
    return parts


def report(parts: list[tuple[str, float]]) -> str:
    total = sum(micros for _, micros in parts)
    rows = "\n".join(f"  {part:40} {micros:6.1f} µs" for part, micros in parts)
    return (f"{rows}\n  {'sum: the floor of one signer process':40} {total:6.1f} µs -> at most {1e6 / total:,.0f} "
            "decisions/s on one core")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=4000)
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    print(f"a durable decision's fixed work, each part alone ({args.decisions:,} distinct decides, CPU time):")
    print(report(decision_floor(args.decisions)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
