"""Box benchmark: create → first exec done, against a bare ``unshare`` + Python start; and the exec round trip
through the daemon against a bare exec inside the same box.  Ratios are against baselines measured in this process.

    .venv/bin/python bench/box.py [--runs 20] [--backend bwrap|ns]

Runs as root (boxes need it).  Uses the real signer (in process), the real daemon API over its Unix socket, the
chosen real backend and the real guest agent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import machine  # noqa: E402

from tests.daemon_harness import run_exec, running_daemon  # noqa: E402

BARE = ["unshare", "-m", "-p", "-f", "-n", "-i", "-u", "--mount-proc", "/usr/bin/python3", "-c", "pass"]
IN_BOX_LOOP = (
    "import subprocess, time, statistics, json\n"
    "times = []\n"
    "for _ in range({n}):\n"
    "    start = time.perf_counter(); subprocess.run(['true']); times.append(time.perf_counter() - start)\n"
    "print(json.dumps(statistics.median(times)))\n"
)


def bare_start(runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(BARE, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def box_numbers(runs: int, backend_name: str) -> tuple[float, float, float]:
    from tkbox_daemon.box.bwrap import BwrapBackend
    from tkbox_daemon.box.nslauncher import NsBackend

    backend = BwrapBackend() if backend_name == "bwrap" else NsBackend()
    base = Path(tempfile.mkdtemp(prefix="tkbench-box-"))
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "README").write_text("bench\n")
    create_times, roundtrips = [], []
    async with running_daemon(base, backend=backend, max_boxes=runs + 2) as daemon, daemon.client() as client:
        for n in range(runs):
            start = time.perf_counter()
            await client.create_box({"name": f"b{n}", "workspace": str(workspace)})
            result = await run_exec(client, f"b{n}", ["true"])
            create_times.append(time.perf_counter() - start)
            assert result["end"]["exit_code"] == 0, result
            if n < runs - 1:
                await client.remove_box(f"b{n}")
        last = f"b{runs - 1}"
        for _ in range(runs * 5):
            start = time.perf_counter()
            result = await run_exec(client, last, ["true"])
            roundtrips.append(time.perf_counter() - start)
        inside = await run_exec(client, last, ["/usr/bin/python3", "-c", IN_BOX_LOOP.format(n=runs * 5)])
        bare_in_box = json.loads(inside["stdout"])
    return statistics.median(create_times), statistics.median(roundtrips), bare_in_box


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backend", choices=("bwrap", "ns"), default="bwrap")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    bare = bare_start(args.runs)
    create, roundtrip, in_box = asyncio.run(box_numbers(args.runs, args.backend))
    print(f"create -> first exec done ({args.backend}): median {create * 1000:.1f} ms; bare unshare + python "
          f"{bare * 1000:.1f} ms; ratio {create / bare:.2f}x (goal <= 1.5x and <= 150 ms)")
    overhead = roundtrip - in_box
    print(f"exec round trip through the daemon: median {roundtrip * 1000:.2f} ms; bare exec in the box "
          f"{in_box * 1000:.2f} ms; overhead {overhead * 1000:.2f} ms (goal <= 3 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
