"""Apply benchmark: a box's 1,000-file patch decided (a Write decision per file, by a real signer) and written to
its checkout by ``tkbox apply``, against plain ``git apply`` of the same patch into a scratch copy of the checkout.

    .venv/bin/python bench/apply.py [--files 1000] [--runs 3]

Runs as root (a real daemon and a bubblewrap box, in throwaway directories). A box appends a line to every file of
a checkout of ``--files`` small text files and stops; then, ``--runs`` times, the checkout is put back (``git
checkout``) and timed:

- baseline: ``git apply`` of the box's patch in a scratch copy of the checkout (the copy is not timed);
- apply: ``tkbox apply BOX --json`` as a whole process (CLI start, the daemon's parse, git's cross-check and scratch
  result, 1,000 decisions, the writes with their fsyncs, the record).

Goal (issue 11): apply ≤ 3 s absolute on this machine.
"""

from __future__ import annotations

import argparse
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

WORK = Path(tempfile.mkdtemp(prefix="tkbench-apply-"))
os.environ.update(HOME=str(WORK / "home"), XDG_STATE_HOME=str(WORK / "state"), XDG_CONFIG_HOME=str(WORK / "config"),
                  XDG_DATA_HOME=str(WORK / "data"), XDG_RUNTIME_DIR=str(WORK / "run"))
for _key in ("TKBOX_SIGNER_DATA_DIR", "TKBOX_SIGNER_RUNTIME_DIR", "TKBOX_DAEMON_RUNTIME_DIR"):
    os.environ.pop(_key, None)

from bench.common import machine  # noqa: E402
from e2e.daemon_process import daemon_process  # noqa: E402
from e2e.signer_process import TKBOX, tkbox  # noqa: E402

GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": str(WORK / "home"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null"}


def make_checkout(files: int) -> Path:
    checkout = WORK / "checkout"
    for index in range(files):
        folder = checkout / f"d{index // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index:05d}.txt").write_text("".join(f"line {n} of file {index}\n" for n in range(20)))
    subprocess.run(["git", "init", "-q"], cwd=checkout, check=True, env=GIT_ENV)
    subprocess.run(["git", "add", "."], cwd=checkout, check=True, env=GIT_ENV)
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base"], cwd=checkout,
                   check=True, env=GIT_ENV)
    return checkout


def git_apply_seconds(checkout: Path, patch: Path) -> float:
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=checkout, check=True, env=GIT_ENV)
    scratch = WORK / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(checkout, scratch, ignore=shutil.ignore_patterns(".git"))
    start = time.perf_counter()
    result = subprocess.run(["git", "apply", str(patch)], cwd=scratch, env=GIT_ENV, capture_output=True)
    elapsed = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"git apply failed: {result.stderr.decode(errors='replace')[:2000]}")
    return elapsed


def tkbox_apply_seconds(checkout: Path) -> tuple[float, dict]:
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=checkout, check=True, env=GIT_ENV)
    start = time.perf_counter()
    result = subprocess.run([TKBOX, "apply", "work", "--json"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    report = json.loads(result.stdout)
    if report.get("status") != "applied":
        raise SystemExit(f"apply did not apply: {report.get('reason') or report}")
    return elapsed, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    checkout = make_checkout(args.files)
    tkbox("signer", "up")
    try:
        with daemon_process(backend="bwrap"):
            tkbox("run", "--name", "work", "--workspace", str(checkout))
            tkbox("exec", "work", "--", "sh", "-c", "for f in d*/f*.txt; do echo changed >> \"$f\"; done")
            tkbox("stop", "work")
            patch = WORK / "box.patch"
            patch.write_bytes(subprocess.run([TKBOX, "diff", "work", "--raw"], capture_output=True,
                                             check=True).stdout)
            patch_bytes = patch.stat().st_size
            baseline, measured, written = [], [], 0
            for _ in range(args.runs):
                baseline.append(git_apply_seconds(checkout, patch))
                seconds, report = tkbox_apply_seconds(checkout)
                measured.append(seconds)
                written = len(report["files"])
    finally:
        tkbox("signer", "down", check=False)
        shutil.rmtree(WORK, ignore_errors=True)
    git_median, apply_median = statistics.median(baseline), statistics.median(measured)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    print(f"patch: {args.files} files, {patch_bytes:,} bytes; {written} written "
          f"per apply; {args.runs} runs")
    print(f"git apply (scratch copy): median {git_median * 1000:.0f} ms")
    print(f"tkbox apply (whole process): median {apply_median * 1000:.0f} ms, min {min(measured) * 1000:.0f} ms, "
          f"ratio {apply_median / git_median:.1f}x git apply; goal <= 3000 ms: "
          f"{'met' if apply_median <= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
