"""Soak: the signer's resident memory over many execs, and its slope after warm-up (goal: flat).

One exec is what a box's exec costs the signer: a ``decide`` and its ``complete``, sent through the real signer
process over its socket (pipelined, ``--window`` at a time, one run like one long-lived box).  The signer's VmRSS
(from ``/proc/PID/status``) is sampled every ``--every`` execs; the slope is a least-squares line through the
samples after ``--warmup`` execs, in KiB per 1,000 execs.

    .venv/bin/python bench/soak.py [--execs 200000] [--every 5000] [--warmup 40000] [--window 64]

The warm-up covers the idempotency window filling (``signer_idempotency_window`` requests: two per exec) and the
allocator settling.  1,000,000 execs take about as long as the signer needs for 2,000,000 durable records; run a
fraction and read the slope (a flat line stays flat).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, signer_process  # noqa: E402

from tkbox_daemon.signer.client import SignerClient, new_request_id  # noqa: E402


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slope_kib_per_1000(samples: list[tuple[int, int]]) -> float:
    """Least-squares slope of (execs, KiB) samples, in KiB per 1,000 execs."""
    if len(samples) < 2:
        return float("nan")
    xs = [x for x, _ in samples]
    ys = [y for _, y in samples]
    return statistics.linear_regression(xs, ys).slope * 1000


def soak_signer(execs: int, every: int, window: int) -> list[tuple[int, int]]:
    samples: list[tuple[int, int]] = []
    with signer_process() as paths:
        pid = int(paths.pid_file.read_text())
        with SignerClient(paths.socket, timeout=120) as client:
            run = client.call("register_run", request_id=new_request_id(), agent={"name": "soak"})
            token = {"run_id": run["run_id"], "run_token": run["run_token"]}
            samples.append((0, rss_kib(pid)))
            done = 0
            next_sample = every
            started = time.perf_counter()
            while done < execs:
                batch = min(window, execs - done)
                decisions = client.pipeline([
                    {"method": "decide", "request_id": new_request_id(), **token, "tool": "Bash",
                     "args": {"command": f"pytest -q tests/test_{done + i}.py"}} for i in range(batch)])
                refused = [d for d in decisions if "decision_id" not in d]
                if refused:
                    raise RuntimeError(f"the signer refused a decision: {refused[0]}")
                completions = client.pipeline([
                    {"method": "complete", "request_id": new_request_id(), **token, "decision_id": d["decision_id"],
                     "status": "ok", "exit_code": 0, "reported_by": "guest"} for d in decisions])
                refused = [c for c in completions if "run_seq" not in c]
                if refused:
                    raise RuntimeError(f"the signer refused a completion: {refused[0]}")
                done += batch
                if done >= next_sample:
                    samples.append((done, rss_kib(pid)))
                    rate = done / (time.perf_counter() - started)
                    print(f"  {done:>9,} execs  signer VmRSS {samples[-1][1] / 1024:7.1f} MiB  ({rate:,.0f} execs/s)",
                          flush=True)
                    next_sample += every
            client.call("close_run", request_id=new_request_id(), **token)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execs", type=int, default=200_000)
    parser.add_argument("--every", type=int, default=5_000)
    parser.add_argument("--warmup", type=int, default=40_000)
    parser.add_argument("--window", type=int, default=64)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"signer alone: {args.execs:,} execs (decide + complete), RSS every {args.every:,}")
    samples = soak_signer(args.execs, args.every, args.window)
    after = [s for s in samples if s[0] >= args.warmup]
    print(f"signer VmRSS: start {samples[0][1] / 1024:.1f} MiB, at warm-up end "
          f"{(after[0][1] if after else samples[-1][1]) / 1024:.1f} MiB, end {samples[-1][1] / 1024:.1f} MiB")
    print(f"signer slope after {args.warmup:,} execs: {slope_kib_per_1000(after):.1f} KiB per 1,000 execs "
          f"(goal: flat, ~0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
