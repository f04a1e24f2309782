"""Verify's memory does not grow with the run: a v2 bundle of 30,000 records (five run entries of 4 MiB, a list of
its records would take about 150 MiB) verifies in a fresh process whose peak resident memory, imports included, stays
under ``RSS_BOUND``, and so does each pool worker's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from large_run_factory import LARGE_KEYS, write_large_run

from tkbox_daemon.evidence.trust import write_trust

RECORDS = 30_000
RSS_BOUND_MIB = 64

# The verify process's own peak is VmHWM: ru_maxrss of a process started by fork and exec keeps the peak of the
# forked copy of its parent (here pytest, itself about 60 MiB). Its pool workers are forked from it, so their
# ru_maxrss (RUSAGE_CHILDREN) is theirs.
_MEASURE = """
import json, resource, sys
from tkbox_daemon.evidence.verify import verify_bundle
report = verify_bundle(sys.argv[1], sys.argv[2])
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({"integrity": report.integrity, "execs": report.counts.execs if report.counts else None,
                  "self": int(status["VmHWM"].split()[0]),
                  "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def test_verifying_a_large_run_stays_within_the_memory_bound(tmp_path: Path) -> None:
    bundle = tmp_path / "large.tkb"
    write_large_run(bundle, RECORDS)
    trust_path = tmp_path / "large.trust.json"
    write_trust(trust_path, LARGE_KEYS.trust_document())
    result = subprocess.run([sys.executable, "-c", _MEASURE, str(bundle), str(trust_path)], capture_output=True,
                            text=True, check=True, timeout=600)
    measured = json.loads(result.stdout)
    assert measured["integrity"] == "VERIFIED" and measured["execs"] > RECORDS // 3
    assert measured["self"] < RSS_BOUND_MIB * 1024, f"verify peaked at {measured['self'] // 1024} MiB"
    assert measured["children"] < RSS_BOUND_MIB * 1024, f"a pool worker peaked at {measured['children'] // 1024} MiB"
