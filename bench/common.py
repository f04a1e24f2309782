"""Shared helpers for the benchmarks: machine description, medians, a throwaway signer process."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tkbox_daemon.signer.paths import SignerPaths


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """CPU seconds (user + system) of this process, or with ``resource.RUSAGE_CHILDREN`` of the children it has
    waited for."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) that process ``pid`` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_jiffies() -> tuple[int, int]:
    """(all, stolen) CPU time of the machine so far, in clock ticks, from /proc/stat's first line.

    Steal is the time this VM's CPUs were ready to run but the hypervisor ran something else. On a shared VM
    it changes a ratio between two runs more than most code changes do, so each measure reports it."""
    fields = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(fields), fields[7]  # user nice system idle iowait irq softirq steal (guest time is within user)


class Steal:
    """The share of the machine's CPU time stolen between ``start()`` and ``stop()`` (0.0 to 1.0)."""

    def __init__(self) -> None:
        self.share = 0.0
        self._start = (0, 0)

    def start(self) -> Steal:
        self._start = cpu_jiffies()
        return self

    def stop(self) -> float:
        total, stolen = cpu_jiffies()
        elapsed = total - self._start[0]
        self.share = (stolen - self._start[1]) / elapsed if elapsed > 0 else 0.0
        return self.share


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


@contextmanager
def signer_process() -> Iterator[SignerPaths]:
    """A real signer in its own temporary directories; yields its paths."""
    base = Path(tempfile.mkdtemp(prefix="tkbench-"))
    data = base / "data"
    runtime = Path(tempfile.mkdtemp(prefix="tkbr-", dir="/tmp"))
    os.chmod(runtime, 0o700)
    env = {**os.environ, "TKBOX_SIGNER_DATA_DIR": str(data), "TKBOX_SIGNER_RUNTIME_DIR": str(runtime)}
    process = subprocess.Popen([sys.executable, "-m", "tkbox_daemon.signer.process"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    socket_path = runtime / "signer.sock"
    from tkbox_daemon.signer.client import SignerClient, SignerUnreachable

    deadline = time.monotonic() + 30
    while True:
        try:
            with SignerClient(socket_path) as client:
                client.call("hello")
            break
        except SignerUnreachable:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("signer did not start: " + process.stderr.read().decode()) from None
            time.sleep(0.02)
    try:
        yield SignerPaths(data, runtime)
    finally:
        process.terminate()
        process.wait(30)
        import shutil

        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
