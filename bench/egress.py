"""Egress proxy benchmark: tunnel throughput against a direct loopback copy, the per-connection cost of a real
signer's decision against an instant one, and 256 connections at once through one box's listener. Every ratio is
against a baseline measured in this same run.

    .venv/bin/python bench/egress.py [--mib 256] [--rounds 3] [--connections 500] [--pause 0.02]
                                     [--concurrent 256] [--backlog N] [--profile FILE]
                                     [--only throughput|decisions|concurrent] [--relay splice|transports|streams]

Loopback only. The proxy (``tkbox_daemon.egress``: the real ``ClientConnection``, ``BoxEgress`` with its allowlist,
pins and address checks, and the real ``RunRecorder`` for its decisions) runs in this process behind a real
``EgressListener`` on a temporary Unix socket, as a box's ``egress.sock``; the client and the upstream servers run
in their own processes (``bench/egress_peers.py``), so the proxy's process does only the proxy's work. The box is a
stand-in with what ``BoxEgress`` reads (``bench_box``: every host the bench uses is on its allowlist, so nothing is
held for a person; events go nowhere), and its context differs from a box's in two places: a loopback address
passes the address check (the real check still runs first; any other address is refused), and its dialer maps
port 443 to the loopback TLS server's port.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import json
import os
import pstats
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import Steal, cpu_seconds, machine, signer_process  # noqa: E402

from tkbox_daemon import limits  # noqa: E402
from tkbox_daemon.boxes.egress_listener import EgressListener  # noqa: E402
from tkbox_daemon.boxes.recorder import RunRecorder  # noqa: E402
from tkbox_daemon.egress import relay as relay_module  # noqa: E402
from tkbox_daemon.egress.allowlist import Allowlist  # noqa: E402
from tkbox_daemon.egress.box_context import BoxEgress  # noqa: E402
from tkbox_daemon.egress.decision import Address, SignerVerdict  # noqa: E402
from tkbox_daemon.egress.hostaddrs import HostAddresses  # noqa: E402
from tkbox_daemon.egress.proxy import ClientConnection, Decided  # noqa: E402
from tkbox_daemon.signer_link import AsyncSignerClient  # noqa: E402

HOST = "files.example"
MIB = 1024 * 1024


# ---- the box's side -----------------------------------------------------------------------------------------------

class BenchEgress(BoxEgress):
    """A box's egress context that may reach loopback, and nothing else."""

    def __init__(self, box: Any, tls_port: int) -> None:
        super().__init__(box, host_addresses=HostAddresses())
        self.tls_port = tls_port

    def check(self, address: Address) -> str | None:
        refusal = super().check(address)  # the real check's cost stays in every measure
        return None if address.is_loopback else (refusal or "is not loopback: the bench reaches nothing else")

    async def dial(self, address: Address, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert address.is_loopback, address
        return await asyncio.open_connection(str(address), self.tls_port if port == 443 else port)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await ClientConnection(self, reader, writer, dial=self.dial).handle()


class InstantEgress(BenchEgress):
    """The baseline: every connection allowed at once, nothing recorded."""

    decided = 0

    async def decide(self, url: str, listed: bool) -> Decided:
        self.decided += 1
        return Decided(SignerVerdict("allow"), f"instant-{self.decided}")


def bench_box(raw_port: int, recorder: RunRecorder | None) -> SimpleNamespace:
    """What ``BoxEgress`` reads of a box: its name, pins, allowlist (and where it notes attempts), run, execs,
    approvals and event sink."""
    return SimpleNamespace(settings=SimpleNamespace(name="bench", resolve={HOST: ("127.0.0.1",)}, inspect="bound"),
                           egress_allowlist=Allowlist.parse([HOST, f"{HOST}:{raw_port}"]),
                           allowlist=SimpleNamespace(note_attempt=lambda attempt: None,
                                                     note_held=lambda attempt: None, release=lambda token: None),
                           recorder=recorder,
                           execs=set(), approvals=None, emit=lambda kind, data=None: None)


@asynccontextmanager
async def listening(context: BenchEgress, backlog: int = 0) -> AsyncIterator[tuple[EgressListener, dict[str, int]]]:
    """The box's listener on a temporary socket, serving ``context``; also counts the most connections that
    were in the proxy at once. ``backlog``: listen again with this accept queue (the listener keeps asyncio's
    default of 100), to see what a longer one changes."""
    directory = Path(tempfile.mkdtemp(prefix="tkbeg-", dir="/tmp"))
    seen = {"open": 0, "most": 0}
    none_open = asyncio.Event()
    none_open.set()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["open"] += 1
        seen["most"] = max(seen["most"], seen["open"])
        none_open.clear()
        try:
            await context.handle(reader, writer)
        finally:
            seen["open"] -= 1
            if not seen["open"]:
                none_open.set()

    listener = EgressListener(directory / "egress.sock", os.getuid(), handler)
    await listener.start()
    if backlog:
        for listening_socket in listener._server.sockets:  # type: ignore[union-attr]
            with socket.socket(fileno=os.dup(listening_socket.fileno())) as duplicate:
                duplicate.listen(backlog)
    try:
        yield listener, seen
        await asyncio.wait_for(none_open.wait(), 60)  # the last connections finish (and are recorded) first
    finally:
        await listener.close()
        shutil.rmtree(directory, ignore_errors=True)


@asynccontextmanager
async def recorded_run(socket_path: Path) -> AsyncIterator[RunRecorder]:
    signer = AsyncSignerClient(socket_path)

    async def stop_box(reason: str) -> None:
        raise RuntimeError(f"the run lost a must-keep record: {reason}")

    recorder = RunRecorder(signer, "bench-egress", stop_box=stop_box, on_event=lambda kind, data: None)
    await recorder.register({"box_id": "bench-egress", "bench": "egress"}, "bench/egress.py")
    try:
        yield recorder
    finally:
        await recorder.close("the bench is over")
        await signer.close()


# ---- the peers ----------------------------------------------------------------------------------------------------

def throwaway_certificate(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
                   .sign(key, hashes.SHA256()))
    cert, key_file = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert, key_file


class Peers:
    """The upstream servers and the client, each a process of ``egress_peers.py``."""

    async def start(self, directory: Path) -> Peers:
        cert, key = throwaway_certificate(directory)
        script = str(BENCH / "egress_peers.py")
        self.upstream = await asyncio.create_subprocess_exec(sys.executable, script, "upstream", str(cert), str(key),
                                                             stdin=asyncio.subprocess.PIPE,
                                                             stdout=asyncio.subprocess.PIPE)
        ports = json.loads(await self.upstream.stdout.readline())
        self.raw_port, self.tls_port = ports["raw"], ports["tls"]
        self.client = await asyncio.create_subprocess_exec(sys.executable, script, "client",
                                                           stdin=asyncio.subprocess.PIPE,
                                                           stdout=asyncio.subprocess.PIPE, limit=16 * MIB)
        return self

    async def ask(self, **job: Any) -> dict[str, Any]:
        self.client.stdin.write(json.dumps(job).encode() + b"\n")
        await self.client.stdin.drain()
        answer = json.loads(await self.client.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"the bench client failed {job['job']}: {answer['error']}")
        return answer

    async def stop(self) -> None:
        for process in (self.client, self.upstream):
            process.stdin.close()
            await process.wait()


# ---- the measures -------------------------------------------------------------------------------------------------

QUIET_STEAL = 0.05  # a round is quiet when less than this share of the machine's CPU time was stolen in both runs


@dataclass
class Rate:
    what: str
    direct: float  # MiB/s, median
    proxied: float  # MiB/s, median
    proxy_cpu: float  # the proxy process's CPU seconds (user + system) per GiB carried, median
    steal: list[tuple[float, float]]  # per round: the share of CPU time stolen during the direct and proxied runs
    quiet_ratios: list[float]  # per quiet round: proxied / direct

    def steal_text(self) -> str:
        shares = [share for pair in self.steal for share in pair]
        quiet = (f"ratio {statistics.median(self.quiet_ratios):.2f} in the {len(self.quiet_ratios)} of "
                 f"{len(self.steal)} rounds with steal < {QUIET_STEAL:.0%}" if self.quiet_ratios else
                 f"no round with steal < {QUIET_STEAL:.0%}")
        return f"steal {min(shares):.0%}-{max(shares):.0%}; {quiet}"


async def throughput(peers: Peers, unix: str, mib: int, rounds: int) -> list[Rate]:
    """Each transfer direct and through the proxy, alternated ``rounds`` times; medians."""
    results = []
    for tls in (False, True):
        port = peers.tls_port if tls else peers.raw_port
        proxied = {"unix": unix, "connect": f"{HOST}:{443 if tls else peers.raw_port}"}
        for job in ("upload", "download"):
            direct, through, cpu, steal = [], [], [], []
            for _ in range(rounds):
                stolen = Steal().start()
                answer = await peers.ask(job=job, bytes=mib * MIB, via={"tcp": port}, tls=tls, server_name=HOST)
                direct.append(mib / answer["seconds"])
                direct_steal = stolen.stop()
                before, stolen = cpu_seconds(), Steal().start()
                answer = await peers.ask(job=job, bytes=mib * MIB, via=proxied, tls=tls, server_name=HOST)
                cpu.append((cpu_seconds() - before) / mib * 1024)
                through.append(mib / answer["seconds"])
                steal.append((direct_steal, stolen.stop()))
            quiet = [through[n] / direct[n] for n in range(rounds) if max(steal[n]) < QUIET_STEAL]
            results.append(Rate(f"{'TLS' if tls else 'raw'} {job}", statistics.median(direct),
                                statistics.median(through), statistics.median(cpu), steal, quiet))
    return results


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def connect_times(peers: Peers, context: BenchEgress, count: int, pause: float) -> list[float]:
    async with listening(context) as (listener, _):
        via = {"unix": str(listener.path), "connect": f"{HOST}:{peers.raw_port}"}
        return (await peers.ask(job="connects", count=count, via=via, pause=pause))["seconds"]


async def signer_round_trips(recorder: RunRecorder, count: int) -> tuple[list[float], list[float]]:
    """The signer's own share: ``RunRecorder.decide`` and ``complete_egress`` one after another, no proxy."""
    decide, complete = [], []
    for n in range(count):
        start = time.perf_counter()
        decision = await recorder.decide("WebFetch", {"url": f"tcp://{HOST}:{n % 65535 + 1}", "listed": True})
        decided = time.perf_counter()
        await recorder.complete_egress(decision.decision_id or "", up=0, down=0)
        decide.append(decided - start)
        complete.append(time.perf_counter() - decided)
    return decide, complete


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.2f} ms, p95 {percentile(samples, 0.95) * 1000:.2f} ms"


async def measure_throughput(args: argparse.Namespace, peers: Peers, signed: BenchEgress) -> None:
    async with listening(signed) as (listener, _):
        profile = cProfile.Profile() if args.profile else None
        if profile:
            profile.enable()
        rates = await throughput(peers, str(listener.path), args.mib, args.rounds)
        if profile:
            profile.disable()
            profile.dump_stats(args.profile)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    for rate in rates:
        print(f"tunnel {rate.what} of {args.mib} MiB: {rate.proxied:,.0f} MiB/s through the proxy; direct loopback "
              f"{rate.direct:,.0f} MiB/s; ratio {rate.proxied / rate.direct:.2f} (goal >= 0.7); the proxy's "
              f"process {rate.proxy_cpu:.2f} CPU s/GiB; {rate.steal_text()}")


async def measure_decisions(args: argparse.Namespace, peers: Peers, signed: BenchEgress, instant: BenchEgress,
                            recorder: RunRecorder) -> None:
    """CONNECT -> 200 with the real signer against an instant decision, alternated in blocks so that load on the
    machine falls on both alike; back to back (each connection's completion is recorded while the next one is
    decided), then with a pause between connections (each decision finds the signer idle)."""
    block = max(1, args.connections // 5)
    for pause, what in ((0.0, "back to back"), (args.pause, f"{args.pause * 1000:.0f} ms apart")):
        base, real, quiet_base, quiet_real, steal = [], [], [], [], []
        cpu = {"instant": 0.0, "signer": 0.0}
        for _ in range(0, args.connections, block):
            blocks = {}
            for context, name in ((instant, "instant"), (signed, "signer")):
                before, stolen = cpu_seconds(), Steal().start()
                blocks[name] = await connect_times(peers, context, block, pause)
                cpu[name] += cpu_seconds() - before
                steal.append(stolen.stop())
            base += blocks["instant"]
            real += blocks["signer"]
            if max(steal[-2:]) < QUIET_STEAL:
                quiet_base += blocks["instant"]
                quiet_real += blocks["signer"]
        overhead = (statistics.median(real) - statistics.median(base)) * 1000
        quiet = (f"median {(statistics.median(quiet_real) - statistics.median(quiet_base)) * 1000:.2f} ms over the "
                 f"{len(quiet_real)} connections of blocks with steal < {QUIET_STEAL:.0%}" if quiet_real else
                 f"no block with steal < {QUIET_STEAL:.0%}")
        print(f"CONNECT -> 200, {len(real)} connections {what}: real signer {ms(real)}; instant decision "
              f"{ms(base)}; overhead: median {overhead:.2f} ms (goal <= 2 ms), p95 "
              f"{(percentile(real, 0.95) - percentile(base, 0.95)) * 1000:.2f} ms; the proxy's process per whole "
              f"connection: {cpu['signer'] / len(real) * 1000:.2f} CPU ms with the signer, "
              f"{cpu['instant'] / len(base) * 1000:.2f} instant; steal {min(steal):.0%}-{max(steal):.0%}; "
              f"overhead {quiet}")
    stolen = Steal().start()
    decide, complete = await signer_round_trips(recorder, min(args.connections, 200))
    print(f"the signer alone (RunRecorder, {len(decide)} in turn, no proxy): decide {ms(decide)}; "
          f"complete_egress {ms(complete)}; steal {stolen.stop():.0%}")


async def measure_concurrent(args: argparse.Namespace, peers: Peers, signed: BenchEgress) -> None:
    async with listening(signed, args.backlog) as (listener, seen):
        via = {"unix": str(listener.path), "connect": f"{HOST}:{peers.raw_port}"}
        answer = await peers.ask(job="concurrent", count=args.concurrent, bytes=64 * 1024, via=via)
        refused_over = listener.refused_over_limit
    name = limits.CONNECTIONS_PER_BOX.name
    extra = answer["extra"]
    verdict = (f"answered 403 naming {name}" if extra.startswith("HTTP/1.1 403") and name in extra else
               f"answered {extra[:60]!r}") + (f", then {answer['extra_error']}" if answer["extra_error"] else "")
    failures = f" (failures: {answer['failures']})" if answer["failures"] else ""
    print(f"{args.concurrent} connections at once through one box (real signer, 64 KiB up each): {answer['ok']} "
          f"succeeded{failures}; all open after {answer['established'] * 1000:.0f} ms, all done after "
          f"{answer['seconds'] * 1000:.0f} ms; at most {seen['most']} in the proxy at once (limit "
          f"{limits.CONNECTIONS_PER_BOX.default}); one more while they were open: {verdict} ({refused_over} "
          "refused over the limit)")


async def main_async(args: argparse.Namespace, signer_socket: Path) -> None:
    directory = Path(tempfile.mkdtemp(prefix="tkbench-egress-"))
    peers = await Peers().start(directory)
    try:
        async with recorded_run(signer_socket) as recorder:
            signed = BenchEgress(bench_box(peers.raw_port, recorder), peers.tls_port)
            instant = InstantEgress(bench_box(peers.raw_port, None), peers.tls_port)
            if args.only in ("all", "throughput"):
                await measure_throughput(args, peers, signed)
            if args.only in ("all", "decisions"):
                await measure_decisions(args, peers, signed, instant, recorder)
            if args.only in ("all", "concurrent"):
                await measure_concurrent(args, peers, signed)
    finally:
        await peers.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB per transfer")
    parser.add_argument("--rounds", type=int, default=3, help="transfers per measure and path (median)")
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=limits.CONNECTIONS_PER_BOX.default)
    parser.add_argument("--backlog", type=int, default=0,
                        help="for the concurrent measure: the box socket's accept queue (default: the listener's)")
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between connections, second measure")
    parser.add_argument("--only", choices=("all", "throughput", "decisions", "concurrent"), default="all")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the proxy's process during the throughput runs")
    parser.add_argument("--relay", choices=("splice", "transports", "streams"), default="splice",
                        help="transports: the relay that holds the transports (no splice); streams: a coroutine per "
                             "direction (the relay before issue 12's bench); to compare")
    args = parser.parse_args()
    if args.relay != "splice":
        relay_module.SPLICE = False  # the relay's own switches between its ways
    if args.relay == "streams":
        relay_module._holdable = lambda side: False
    print(f"machine: {machine()}; load average {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    with signer_process() as paths:
        asyncio.run(main_async(args, paths.socket))
    print(f"load average after: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
