"""Signer benchmark: durable decisions per second, verified records per second, decide latency against a bare
NDJSON echo on the same kind of socket.  Every ratio is against a baseline measured in this same process.

    .venv/bin/python bench/signer.py [--decisions 20000] [--clients 4] [--records 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Steal, cpu_seconds, machine, median_ms, process_cpu, signer_process  # noqa: E402
from signer_floor import decision_floor, report  # noqa: E402

from tkbox_daemon.signer.client import SignerClient, new_request_id  # noqa: E402
from tkbox_daemon.signer.paths import SignerPaths  # noqa: E402

WINDOW = 64
RUN_SIZE = 2000  # decisions per run, below the signer's 4,096 pending decisions per run


def _echo_server(path: str, ready: threading.Event) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()

    async def main() -> None:
        server = await asyncio.start_unix_server(serve, path=path)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def echo_latency(samples: int) -> float:
    path = tempfile.mktemp(prefix="tkecho-", suffix=".sock", dir="/tmp")
    ready = threading.Event()
    threading.Thread(target=_echo_server, args=(path, ready), daemon=True).start()
    ready.wait(10)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    reader = sock.makefile("rb")
    line = json.dumps({"method": "decide", "request_id": "x", "args": {"command": "ls -la"}}).encode() + b"\n"
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        sock.sendall(line)
        json.loads(reader.readline())
        times.append(time.perf_counter() - start)
    sock.close()
    return median_ms(times)


def decide_latency(socket_path: Path, samples: int) -> float:
    with SignerClient(socket_path) as client:
        run = client.call("register_run", request_id=new_request_id(), agent={"name": "bench"})
        token = {"run_id": run["run_id"], "run_token": run["run_token"]}
        times = []
        for n in range(samples):
            start = time.perf_counter()
            client.call("decide", request_id=new_request_id(), **token, tool="Bash", args={"command": f"ls -la {n}"})
            times.append(time.perf_counter() - start)
    return median_ms(times)


def _client_worker(socket_path: str, count: int, barrier: multiprocessing.Barrier, result: multiprocessing.Queue) -> None:
    try:
        with SignerClient(socket_path) as client:
            runs = [_register(client) for _ in range(count // RUN_SIZE + 1)]
            barrier.wait()
            done = 0
            while done < count:
                token = runs[done // RUN_SIZE]
                batch = min(WINDOW, count - done, RUN_SIZE - done % RUN_SIZE)
                replies = client.pipeline([
                    {"method": "decide", "request_id": new_request_id(), **token, "tool": "Bash",
                     "args": {"command": f"pytest -q tests/test_{done + i}.py"}}
                    for i in range(batch)
                ])
                failed = [reply for reply in replies if "decision_id" not in reply]
                if failed:
                    raise RuntimeError(f"the signer refused a decision: {failed[0]}")
                done += batch
        result.put(done)
    except BaseException as exc:  # the parent must hear about it instead of waiting forever
        result.put(exc)


def _register(client: SignerClient) -> dict[str, str]:
    run = client.call("register_run", request_id=new_request_id(), agent={"name": "bench"})
    return {"run_id": run["run_id"], "run_token": run["run_token"]}


def durable_throughput(socket_path: Path, total: int, clients: int) -> float:
    barrier = multiprocessing.Barrier(clients + 1, timeout=120)
    result: multiprocessing.Queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_client_worker, args=(str(socket_path), total // clients, barrier, result))
               for _ in range(clients)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    outcomes = [result.get(timeout=600) for _ in workers]
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if errors:
        raise RuntimeError(f"a bench client failed: {errors[0]}")
    decided = sum(outcomes)
    elapsed = time.perf_counter() - start
    for worker in workers:
        worker.join()
    return decided / elapsed


def verify_throughput(paths: SignerPaths, records: int) -> tuple[float, float, int]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from tkbox_daemon.evidence.signature_check import RecordKey
    from tkbox_daemon.evidence.trust import load_trust
    from tkbox_daemon.evidence.verify import verify_bundle
    from tkbox_daemon.signer.export import export_run, write_trust

    with SignerClient(paths.socket) as client:
        run = client.call("register_run", request_id=new_request_id(), agent={"name": "bench"})
        token = {"run_id": run["run_id"], "run_token": run["run_token"]}
        pairs = (records - 2) // 2  # each command is a decision and its completion
        for start in range(0, pairs, WINDOW):
            decisions = client.pipeline([
                {"method": "decide", "request_id": new_request_id(), **token, "tool": "Bash",
                 "args": {"command": f"echo {n}"}} for n in range(start, min(start + WINDOW, pairs))
            ])
            client.pipeline([
                {"method": "complete", "request_id": new_request_id(), **token, "decision_id": d["decision_id"],
                 "status": "ok", "exit_code": 0} for d in decisions
            ])
        client.call("close_run", request_id=new_request_id(), **token)
    out = Path(tempfile.mkdtemp(prefix="tkverify-"))
    exported = export_run(paths, run["run_id"], out / "run.tkb")
    write_trust(paths, out / "run.trust.json")
    trust = load_trust(out / "run.trust.json")
    start = time.perf_counter()
    report = verify_bundle(out / "run.tkb", trust)
    elapsed = time.perf_counter() - start
    assert report.integrity == "VERIFIED", report
    key = Ed25519PrivateKey.generate()
    message = b"x" * 200
    signature = key.sign(message)
    public = key.public_key()
    start = time.perf_counter()
    for _ in range(exported["records"]):
        public.verify(signature, message)
    bare_openssl = exported["records"] / (time.perf_counter() - start)
    record_key = RecordKey(public.public_bytes_raw())
    start = time.perf_counter()
    for _ in range(exported["records"]):
        record_key.verifies(signature, message)
    bare_libsodium = exported["records"] / (time.perf_counter() - start)
    return exported["records"] / elapsed, bare_libsodium, bare_openssl, exported["records"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--latency-samples", type=int, default=2000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    echo_ms = echo_latency(args.latency_samples)
    with signer_process() as paths:
        decide_ms = decide_latency(paths.socket, args.latency_samples)
        with SignerClient(paths.socket) as client:
            signer_pid = client.call("hello")["pid"]
        signer_before, stolen = process_cpu(signer_pid), Steal().start()
        clients_before = cpu_seconds(resource.RUSAGE_CHILDREN)  # the client processes, once waited for
        throughput = durable_throughput(paths.socket, args.decisions, args.clients)
        stolen.stop()
        signer_cpu = (process_cpu(signer_pid) - signer_before) / args.decisions * 1e6
        clients_cpu = (cpu_seconds(resource.RUSAGE_CHILDREN) - clients_before) / args.decisions * 1e6
    print(f"decide latency (durable, sequential): median {decide_ms:.3f} ms; bare NDJSON echo {echo_ms:.3f} ms; "
          f"ratio {decide_ms / echo_ms:.1f}x")
    print(f"durable decisions/s ({args.clients} clients, window {WINDOW}): {throughput:,.0f} (goal >= 5,000, issue 14); "
          f"CPU per decision: the signer {signer_cpu:.0f} µs, the clients {clients_cpu:.0f} µs; steal {stolen.share:.0%}")
    print("the floor: a decision's fixed work, each part alone in this process (bench/signer_floor.py):")
    print(report(decision_floor(min(args.decisions, 4000))))
    with signer_process() as paths:
        rate, bare, bare_openssl, count = verify_throughput(paths, args.records)
    print(f"verify: {count:,} records at {rate:,.0f} records/s (goal >= 20,000); "
          f"one-core bare Ed25519 verify {bare:,.0f}/s (libsodium, as verify uses; OpenSSL {bare_openssl:,.0f}/s); "
          f"ratio {rate / bare:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
