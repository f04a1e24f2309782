"""Box benchmark: create → first exec done, cold and taken from the boxes started ahead (``boxes/pool.py``),
against a bare ``unshare`` + Python start; the exec round trip
through the daemon against a bare exec inside the same box; and, with ``--workspaces``, create → first exec and
``tkbox rm`` for workspaces of several sizes (empty, 1,000 files / 10 MB, 20,000 files / 200 MB, a real source
tree: this repo without .venv and .git plus /usr/lib/python3.11, as a git work tree), each against a bind +
overlay mount of the same tree in a fresh mount namespace, measured in the same run, interleaved.  Ratios are
against baselines measured in this process.

    .venv/bin/python bench/box.py [--runs 20] [--backend bwrap|ns] [--workspaces [--start-ahead]] [--workspace-runs 3]

Runs as root (boxes need it).  Uses the real signer (in process), the real daemon API over its Unix socket, the
chosen real backend and the real guest agent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import Steal, machine  # noqa: E402

from tests.daemon_harness import run_exec, running_daemon  # noqa: E402

BARE = ["unshare", "-m", "-p", "-f", "-n", "-i", "-u", "--mount-proc", "/usr/bin/python3", "-c", "pass"]
IN_BOX_LOOP = (
    "import subprocess, time, statistics, json\n"
    "times = []\n"
    "for _ in range({n}):\n"
    "    start = time.perf_counter(); subprocess.run(['true']); times.append(time.perf_counter() - start)\n"
    "print(json.dumps(statistics.median(times)))\n"
)


async def until_started_ahead(daemon: object) -> None:
    """Until a daemon that starts boxes ahead has one ready (its refill waits 1 s after a take); at once for one
    that starts none."""
    pool = daemon.manager.pool  # type: ignore[attr-defined]
    while pool.size and not pool.ready:
        await asyncio.sleep(0.05)


def bare_start(runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(BARE, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def box_numbers(runs: int, backend_name: str) -> tuple[list[float], list[float], float, float]:
    """Create -> first exec, cold (a daemon that starts no box ahead) and taken from the boxes started ahead (a
    second daemon, ``--start-ahead 1``, waited for until one is ready), interleaved run by run; then the exec round
    trip and a bare exec in the last box."""
    from tkbox_daemon.box.bwrap import BwrapBackend
    from tkbox_daemon.box.nslauncher import NsBackend

    backend = BwrapBackend() if backend_name == "bwrap" else NsBackend()
    base = Path(tempfile.mkdtemp(prefix="tkbench-box-"))
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "README").write_text("bench\n")
    cold_times, warm_times, roundtrips = [], [], []
    async with contextlib.AsyncExitStack() as stack:
        cold = await stack.enter_async_context(running_daemon(base / "cold", backend=backend, max_boxes=runs + 2))
        warm = await stack.enter_async_context(running_daemon(base / "warm", backend=backend, max_boxes=runs + 2,
                                                              start_ahead=1))
        cold_client = await stack.enter_async_context(cold.client())
        warm_client = await stack.enter_async_context(warm.client())
        for n in range(runs):
            for daemon, client, times in ((cold, cold_client, cold_times), (warm, warm_client, warm_times)):
                await until_started_ahead(daemon)
                start = time.perf_counter()
                await client.create_box({"name": f"b{n}", "workspace": str(workspace)})
                result = await run_exec(client, f"b{n}", ["true"])
                times.append(time.perf_counter() - start)
                assert result["end"]["exit_code"] == 0, result
                if n < runs - 1:
                    await client.remove_box(f"b{n}")
        last = f"b{runs - 1}"
        for _ in range(runs * 5):
            start = time.perf_counter()
            result = await run_exec(cold_client, last, ["true"])
            roundtrips.append(time.perf_counter() - start)
        inside = await run_exec(cold_client, last, ["/usr/bin/python3", "-c", IN_BOX_LOOP.format(n=runs * 5)])
        bare_in_box = json.loads(inside["stdout"])
    return cold_times, warm_times, statistics.median(roundtrips), bare_in_box


WORKSPACE_SIZES = (("empty", 0), ("1,000 files / 10 MB", 1000), ("20,000 files / 200 MB", 20_000),
                   ("source tree", None))
FILE_BYTES = 10_000
FILES_PER_DIR = 50


def make_workspace(root: Path, files: int | None) -> Path:
    """An empty directory, ``files`` files of 10 kB (50 a directory, 20 directories a parent), or a real tree."""
    root.mkdir()
    if files is None:
        shutil.copytree(ROOT, root / "tkbox", symlinks=True,
                        ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info"))
        shutil.copytree("/usr/lib/python3.11", root / "python3.11", symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root.parent)}
        subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
        subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
        return root
    data = os.urandom(FILE_BYTES)
    for index in range(files):
        directory = root / f"d{index // FILES_PER_DIR // 20}" / f"s{index // FILES_PER_DIR}"
        if index % FILES_PER_DIR == 0:
            directory.mkdir(parents=True)
        (directory / f"f{index}.txt").write_bytes(data)
    return root


def bind_overlay(lower: Path, scratch: Path) -> float:
    """The baseline: a fresh mount namespace with a read-only bind of ``lower`` and an overlay over it, listed."""
    for name in ("upper", "work", "merged"):
        (scratch / name).mkdir(parents=True)
    script = (f"mount --bind -o ro {lower} {scratch}/merged && mount -t overlay overlay -o lowerdir={scratch}/merged,"
              f"upperdir={scratch}/upper,workdir={scratch}/work {scratch}/merged && ls {scratch}/merged >/dev/null")
    start = time.perf_counter()
    subprocess.run(["unshare", "-m", "sh", "-c", script], check=True)
    elapsed = time.perf_counter() - start
    shutil.rmtree(scratch)
    return elapsed


def file_count(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


async def workspace_numbers(runs: int, backend_name: str, start_ahead: int) -> list[dict[str, object]]:
    from tkbox_daemon.box.bwrap import BwrapBackend
    from tkbox_daemon.box.nslauncher import NsBackend

    backend = BwrapBackend() if backend_name == "bwrap" else NsBackend()
    base = Path(tempfile.mkdtemp(prefix="tkbench-ws-"))
    rows = []
    try:
        async with running_daemon(base, backend=backend, max_boxes=4, start_ahead=start_ahead) as daemon, \
                daemon.client() as client:
            for label, files in WORKSPACE_SIZES:
                workspace = make_workspace(base / f"ws-{len(rows)}", files)
                subprocess.run(["sync"], check=True)
                creates, removes, baselines, steal = [], [], [], []
                for run in range(runs):
                    baselines.append(bind_overlay(workspace, base / "overlay-scratch"))
                    name = f"w{len(rows)}-{run}"
                    await until_started_ahead(daemon)
                    start, stolen = time.perf_counter(), Steal().start()
                    await client.create_box({"name": name, "workspace": str(workspace)})
                    result = await run_exec(client, name, ["true"])
                    creates.append(time.perf_counter() - start)
                    steal.append(stolen.stop())
                    assert result["end"]["exit_code"] == 0, result
                    start = time.perf_counter()
                    await client.remove_box(name)
                    removes.append(time.perf_counter() - start)
                    daemon.manager.layer_reaper.wait(600)  # the next run starts on a quiet disk
                rows.append({"label": label, "files": file_count(workspace), "create": statistics.median(creates),
                             "create_runs": creates, "baseline": statistics.median(baselines),
                             "rm": statistics.median(removes), "steal": max(steal)})
                shutil.rmtree(workspace)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def print_workspaces(rows: list[dict[str, object]], backend: str) -> None:
    empty = rows[0]["create"]
    assert isinstance(empty, float)
    print(f"workspace sizes ({backend}): create -> first exec done, median; bind + overlay of the same tree in the "
          "same run; tkbox rm until it returns")
    for row in rows:
        create, baseline, removed = row["create"], row["baseline"], row["rm"]
        assert isinstance(create, float) and isinstance(baseline, float) and isinstance(removed, float)
        runs = ", ".join(f"{value * 1000:.0f}" for value in row["create_runs"])  # type: ignore[attr-defined]
        print(f"  {row['label']:<24} {row['files']:>6} files  create {create * 1000:7.1f} ms ({runs})  "
              f"{create / empty:4.2f}x empty (goal <= 1.5x)  bind+overlay {baseline * 1000:5.1f} ms  "
              f"rm {removed * 1000:6.1f} ms (goal <= 200 ms)  steal up to {row['steal']:.0%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backend", choices=("bwrap", "ns"), default="bwrap")
    parser.add_argument("--workspaces", action="store_true", help="only the workspace sizes and tkbox rm")
    parser.add_argument("--workspace-runs", type=int, default=3)
    parser.add_argument("--start-ahead", action="store_true",
                        help="with --workspaces: each create takes a box started ahead (boxes/pool.py)")
    args = parser.parse_args()
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.2f}")
    if args.workspaces:
        rows = asyncio.run(workspace_numbers(args.workspace_runs, args.backend, 1 if args.start_ahead else 0))
        print_workspaces(rows, args.backend + (", each taken from the boxes started ahead" if args.start_ahead
                                               else ", cold"))
        return 0
    bare = bare_start(args.runs)
    cold_times, warm_times, roundtrip, in_box = asyncio.run(box_numbers(args.runs, args.backend))
    cold, warm = statistics.median(cold_times), statistics.median(warm_times)
    print(f"create -> first exec done ({args.backend}), empty workspace, medians of {args.runs}: taken from the "
          f"boxes started ahead {warm * 1000:.1f} ms (goal <= 50 ms); cold {cold * 1000:.1f} ms; bare unshare + "
          f"python {bare * 1000:.1f} ms; started ahead / cold {warm / cold:.2f}x")
    print("  started ahead, each run (ms): " + ", ".join(f"{value * 1000:.0f}" for value in warm_times))
    print("  cold, each run (ms):          " + ", ".join(f"{value * 1000:.0f}" for value in cold_times))
    overhead = roundtrip - in_box
    print(f"exec round trip through the daemon: median {roundtrip * 1000:.2f} ms; bare exec in the box "
          f"{in_box * 1000:.2f} ms; overhead {overhead * 1000:.2f} ms (goal <= 3 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
