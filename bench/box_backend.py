"""Box start cost: a full box running ``/usr/bin/python3 -c pass`` with each backend, against a bare
``unshare -m -p -f -n -i -u --mount-proc /usr/bin/python3 -c pass``; prints medians and the ratio.

Timed: from ``backend.start()`` to ``wait()`` returning (the box's whole life, cgroup removal included), i.e.
create -> exec -> exit of the interpreter, the same span as the bare unshare command. Not timed: building the
base copy, ``/etc`` and the per-box upper/work directories, which the daemon does before it starts a box.

Project goal (docs/box-isolation.md): a full box with its guest starts within 1.5x of a bare unshare + python
start and under 150 ms median. Run as root: ``.venv/bin/python bench/box_backend.py --runs 30``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tkbox_daemon.box.backend import BoxLimits, BoxSpec
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.etcgen import generate_etc
from tkbox_daemon.box.nslauncher import NsBackend
from tkbox_daemon.box.uids import UidAllocator
from tkbox_daemon.box.workspace import build_base

PYTHON = "/usr/bin/python3"
BARE_LABEL = "bare unshare + python"
BARE = ["unshare", "-m", "-p", "-f", "-n", "-i", "-u", "--mount-proc", PYTHON, "-c", "pass"]


def bare_unshare_ms() -> float:
    start = time.perf_counter()
    subprocess.run(BARE, check=True)
    return (time.perf_counter() - start) * 1000


class Bench:
    """Prepared directories for many boxes of one uid."""

    def __init__(self, root: Path, uid: int, job_uid: int) -> None:
        self.root, self.uid, self.job_uid, self.count = root, uid, job_uid, 0
        checkout = root / "checkout"
        checkout.mkdir()
        (checkout / "README").write_text("bench\n")
        self.layers = root / "layers"  # closed to other users (0700), as the daemon keeps a box's layers
        self.layers.mkdir(mode=0o700)
        build_base(checkout, self.layers / "base", box_uid=job_uid)
        generate_etc(root / "etc")

    def spec(self, limits: BoxLimits | None) -> BoxSpec:
        self.count += 1
        box = self.root / f"b{self.count}"
        rw = self.layers / f"b{self.count}"
        (box / "state").mkdir(parents=True, mode=0o755)
        for name in ("upper", "work"):
            (rw / name).mkdir(parents=True, mode=0o755)
            os.chown(rw / name, self.job_uid, self.job_uid)
        return BoxSpec(box_id=f"bench-{os.getpid()}-{self.count}", state_dir=box / "state",
                       base_dir=self.layers / "base", upper_dir=rw / "upper", work_dir=rw / "work",
                       etc_dir=self.root / "etc", box_uid=self.uid, job_uid=self.job_uid, limits=limits or BoxLimits(),
                       use_cgroups=limits is not None)


async def box_ms(backend, bench: Bench, limits: BoxLimits | None) -> float:
    spec = bench.spec(limits)
    start = time.perf_counter()
    box = await backend.start(spec, [PYTHON, "-c", "pass"])
    code = await box.wait()
    elapsed = (time.perf_counter() - start) * 1000
    if code != 0:
        raise SystemExit(f"{backend.name} box failed ({code}): {spec.log_path.read_text()}")
    return elapsed


def describe(name: str, times: list[float], reference: float | None) -> str:
    median = statistics.median(times)
    ratio = f"  {median / reference:4.2f}x bare" if reference else ""
    return f"{name:<28} median {median:6.1f} ms  min {min(times):6.1f}  max {max(times):6.1f}{ratio}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backends", default="bwrap,ns")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (boxes need it)")
    registry = Path(tempfile.gettempdir()) / "tkbox-bench-uids"
    allocator = UidAllocator(registry)
    owner = f"bench-{os.getpid()}"
    uid, job_uid = allocator.allocate(owner), allocator.allocate(owner)
    root = Path(tempfile.mkdtemp(prefix="tkbench-"))
    os.chmod(root, 0o755)
    try:
        bench = Bench(root, uid, job_uid)
        backends = {"bwrap": BwrapBackend(), "ns": NsBackend()}
        cases = {BARE_LABEL: None}
        for name in args.backends.split(","):
            cases[f"{name} box (no cgroups)"] = (backends[name], None)
            cases[f"{name} box + cgroup limits"] = (backends[name], BoxLimits(memory_bytes=1 << 30, pids_max=512))
        times: dict[str, list[float]] = {label: [] for label in cases}
        for round_number in range(args.runs + 3):  # interleaved, so background load hits every case alike
            for label, case in cases.items():
                elapsed = bare_unshare_ms() if case is None else await box_ms(case[0], bench, case[1])
                if round_number >= 3:  # the first rounds warm caches
                    times[label].append(elapsed)
        reference = statistics.median(times[BARE_LABEL])
        for label, values in times.items():
            print(describe(label, values, None if label == BARE_LABEL else reference))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for claimed in (uid, job_uid):
            allocator.release(claimed, owner)


if __name__ == "__main__":
    asyncio.run(main())
