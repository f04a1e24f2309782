"""Patch benchmark: the host computing the workspace patch from the layers, against the guest's code path.

    .venv/bin/python bench/host_patch.py [--files 1000 20000] [--runs 5]

Runs as root (it mounts an overlay as a box does). For each size it builds a base of small text files (100 per
directory), mounts the overlay, edits every file through the merged view (so the upper layer holds them all, copied
up) and adds as many new ones, then times, median of ``--runs``:

- host: ``tkbox_daemon.patch.compute_patch(upper, lower, BytesIO)`` — no merged view, ``trusted.overlay.opaque``
  read as root, with the host's bounds;
- guest: ``tkbox_guest.diff.iter_patch(upper, lower, merged)`` — what the guest runs in the box (the merged view
  for opaque directories), same bytes.
"""

from __future__ import annotations

import argparse
import io
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
from common import machine  # noqa: E402

from tkbox_daemon.patch import compute_patch  # noqa: E402
from tkbox_guest import diff  # noqa: E402

PER_DIR = 100


def build(top: Path, files: int) -> tuple[Path, Path, Path, Path]:
    lower, upper, work, merged = (top / name for name in ("lower", "upper", "work", "merged"))
    for path in (lower, upper, work, merged):
        path.mkdir()
    for index in range(files):
        folder = lower / f"d{index // PER_DIR:04d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{index:06d}.txt").write_text("".join(f"line {n} of file {index}\n" for n in range(20)))
    options = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off,index=off"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], check=True)
    for index in range(files):
        folder = merged / f"d{index // PER_DIR:04d}"
        edited = folder / f"f{index:06d}.txt"
        edited.write_text(edited.read_text().replace("line 10 ", "LINE 10 "))
        (folder / f"new{index:06d}.txt").write_text(f"new file {index}\n")
    return lower, upper, work, merged


def measure(files: int, runs: int) -> tuple[int, int, float, float]:
    """(upper entries, patch bytes, host seconds, guest seconds): medians of ``runs``, host and guest interleaved so
    that load from elsewhere on the machine falls on both alike."""
    top = Path(tempfile.mkdtemp(prefix="tkbench-patch-"))
    merged = None
    try:
        lower, upper, _, merged = build(top, files)
        host_times, guest_times = [], []
        for _ in range(runs):
            start = time.perf_counter()
            summary = compute_patch(upper, lower, io.BytesIO())
            host_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            patch = b"".join(diff.iter_patch(upper, lower, merged))
            guest_times.append(time.perf_counter() - start)
            assert summary.size == len(patch), "host and guest disagree"
        entries = sum(1 for _ in upper.rglob("*"))
        return entries, len(patch), statistics.median(host_times), statistics.median(guest_times)
    finally:
        if merged is not None:
            subprocess.run(["umount", str(merged)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(machine())
    print(f"{'files in base':>14} {'upper entries':>14} {'patch MiB':>10} {'host s':>8} {'guest s':>8} {'host/guest':>11}")
    for files in args.files:
        entries, size, host_s, guest_s = measure(files, args.runs)
        print(f"{files:>14} {entries:>14} {size / 2**20:>10.1f} {host_s:>8.3f} {guest_s:>8.3f} {host_s / guest_s:>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
