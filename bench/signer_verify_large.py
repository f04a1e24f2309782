"""Large runs from the real signer, exported and verified: records/s of ``tkbox verify`` against one core's bare
Ed25519 verification of the same number of records in this process, and peak memory.

For each size, a real signer (``tkbox_daemon.signer.process``, its own directories) records a run of decisions and
their results over its socket; ``tkbox signer export`` writes the bundle and ``tkbox verify`` checks it, each as a
whole process under ``/usr/bin/time`` (its peak resident set, the largest of the process and its pool workers).
The bare baseline (libsodium, as verify uses) runs before and after each verify (``--repeats`` of them); each verify
is compared with the mean of the baselines on either side, and the median ratio is printed, with the CPU time per
record of verify (all its processes) against the baseline's, which the machine's other load moves much less.
Making a run is bounded by ``--make-budget`` seconds: past it the run is closed where it is and the line says
how many records were made, at what rate, and how long the full size would take.

    .venv/bin/python bench/signer_verify_large.py [--records 100000 1000000] [--make-budget 900]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Steal, machine, signer_process  # noqa: E402

from tkbox_daemon.signer.client import SignerClient, new_request_id  # noqa: E402
from tkbox_daemon.signer.paths import SignerPaths  # noqa: E402

WINDOW = 64
TKBOX = [sys.executable, "-m", "tkbox_tui.cli.main"]


def make_run(paths: SignerPaths, records: int, budget: float) -> tuple[str, int, float]:
    """A closed run of about ``records`` records; returns (run id, records made, seconds)."""
    start = time.perf_counter()
    made = 2  # run.registered and run.closed
    with SignerClient(paths.socket) as client:
        run = client.call("register_run", request_id=new_request_id(), agent={"name": "bench"})
        token = {"run_id": run["run_id"], "run_token": run["run_token"]}
        pairs = (records - 2) // 2
        for first in range(0, pairs, WINDOW):
            decisions = client.pipeline([
                {"method": "decide", "request_id": new_request_id(), **token, "tool": "Bash",
                 "args": {"command": f"pytest -q tests/test_{n}.py"}} for n in range(first, min(first + WINDOW, pairs))
            ])
            refused = [reply for reply in decisions if "decision_id" not in reply]
            if refused:
                raise RuntimeError(f"the signer refused a decision: {refused[0]}")
            client.pipeline([
                {"method": "complete", "request_id": new_request_id(), **token, "decision_id": d["decision_id"],
                 "status": "ok", "exit_code": 0} for d in decisions
            ])
            made += 2 * len(decisions)
            if time.perf_counter() - start > budget:
                break
        client.call("close_run", request_id=new_request_id(), **token)
    return run["run_id"], made, time.perf_counter() - start


def timed(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float, int, float]:
    """Run ``command`` under /usr/bin/time: (result, wall seconds, peak resident KiB of it and its children, CPU
    seconds of it and its children)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        start = time.perf_counter()
        result = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%M %U %S", *command], env=env, text=True,
                                capture_output=True, check=False)
        elapsed = time.perf_counter() - start
        peak, user, system = Path(report.name).read_text().split()[-3:]
    return result, elapsed, int(peak), float(user) + float(system)


def bare_rate(count: int) -> tuple[float, float]:
    """One core's libsodium Ed25519 verifications per second (wall) and CPU seconds per verification, ``count`` of
    them, in this process."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from tkbox_daemon.evidence.signature_check import RecordKey

    key = Ed25519PrivateKey.generate()
    message = b"x" * 200  # about a signed header's size
    signature = key.sign(message)
    record_key = RecordKey(key.public_key().public_bytes_raw())
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        record_key.verifies(signature, message)
    return count / (time.perf_counter() - start), (time.process_time() - cpu) / count


def bench_size(records: int, budget: float, repeats: int) -> dict[str, object]:
    out = Path(tempfile.mkdtemp(prefix="tkverify-large-"))
    try:
        return _bench_size(records, budget, repeats, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _bench_size(records: int, budget: float, repeats: int, out: Path) -> dict[str, object]:
    with signer_process() as paths:
        run_id, made, make_seconds = make_run(paths, records, budget)
        env = {**os.environ, "TKBOX_SIGNER_DATA_DIR": str(paths.data_dir),
               "TKBOX_SIGNER_RUNTIME_DIR": str(paths.runtime_dir)}
        bundle, trust = out / "run.tkb", out / "run.trust.json"
        exported, export_seconds, export_peak, _ = timed([*TKBOX, "signer", "export", "--run", run_id, "-o", str(bundle),
                                                       "--json"], env)
        if exported.returncode:
            raise RuntimeError(f"export failed: {exported.stderr}")
        subprocess.run([*TKBOX, "signer", "trust", "-o", str(trust)], env=env, check=True, capture_output=True)
    info = json.loads(exported.stdout)
    count = info["records"]
    # Baseline, verify, baseline, verify, … baseline: each verify against the mean of the baselines on either side.
    bares = [bare_rate(count)]
    verifies, steal = [], []
    for _ in range(repeats):
        stolen = Steal().start()
        verified, verify_seconds, verify_peak, verify_cpu = timed(
            [*TKBOX, "verify", str(bundle), "--trust", str(trust), "--json"], dict(os.environ))
        steal.append(stolen.stop())
        verifies.append((verify_seconds, verify_peak, verify_cpu, json.loads(verified.stdout)["integrity"]))
        bares.append(bare_rate(count))
    ratios = sorted((count / seconds) / ((bares[n][0] + bares[n + 1][0]) / 2)
                    for n, (seconds, *_) in enumerate(verifies))
    verify_seconds = statistics.median(seconds for seconds, *_ in verifies)
    verify_peak = max(peak for _, peak, *_ in verifies)
    verify_cpu = statistics.median(cpu for _, _, cpu, _ in verifies)
    report = {"integrity": ",".join(sorted({integrity for *_, integrity in verifies}))}
    bare = statistics.median(rate for rate, _ in bares)
    bare_cpu = statistics.median(cpu for _, cpu in bares)
    bare_before, bare_after = min(rate for rate, _ in bares), max(rate for rate, _ in bares)
    size = bundle.stat().st_size
    return {
        "asked": records, "made": made, "make_seconds": make_seconds, "run_records": count,
        "tree_size": info["tree_size"], "integrity": report["integrity"], "bundle_bytes": size,
        "export_seconds": export_seconds, "export_peak_kib": export_peak, "verify_seconds": verify_seconds,
        "verify_peak_kib": verify_peak, "records_per_second": count / verify_seconds, "bare_per_second": bare,
        "bare_before": bare_before, "bare_after": bare_after, "ratio": statistics.median(ratios), "ratios": ratios,
        "verify_cpu_us_per_record": verify_cpu / count * 1e6, "bare_cpu_us": bare_cpu * 1e6,
        "cores": os.cpu_count() or 1, "verify_steal": [min(steal), max(steal)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--make-budget", type=float, default=900.0, help="seconds to make one run, at most")
    parser.add_argument("--repeats", type=int, default=3, help="verifies per size, each between two baselines")
    args = parser.parse_args()
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.2f}")
    for records in args.records:
        result = bench_size(records, args.make_budget, args.repeats)
        made = result["made"]
        fraction = "" if made >= records else (
            f" (made {made:,} of {records:,} in the {args.make_budget:.0f} s budget at {made / result['make_seconds']:,.0f} "
            f"records/s: the full run would take {records / (made / result['make_seconds']) / 60:.0f} min)")
        print(f"{result['run_records']:,} run records{fraction}: {result['integrity']}; verify "
              f"{result['verify_seconds']:.1f} s = {result['records_per_second']:,.0f} records/s; bare Ed25519 "
              f"{result['bare_per_second']:,.0f}/s (median; {result['bare_before']:,.0f} to "
              f"{result['bare_after']:,.0f}); ratio {result['ratio']:.2f}x (median of "
              f"{', '.join(f'{ratio:.2f}' for ratio in result['ratios'])}); CPU per record {result['verify_cpu_us_per_record']:.0f} µs "
              f"(all processes) against {result['bare_cpu_us']:.0f} µs bare, so on {result['cores']} idle cores "
              f"at most {result['cores'] * result['bare_cpu_us'] / result['verify_cpu_us_per_record']:.2f}x; verify peak RSS "
              f"{result['verify_peak_kib'] / 1024:.1f} MiB; export {result['export_seconds']:.1f} s, peak RSS "
              f"{result['export_peak_kib'] / 1024:.1f} MiB; bundle {result['bundle_bytes'] / 1e6:.1f} MB "
              f"({result['bundle_bytes'] / result['run_records']:.0f} B/record); load {os.getloadavg()[0]:.2f}; steal "
              f"during the verifies {result['verify_steal'][0]:.0%}-{result['verify_steal'][1]:.0%}")
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
