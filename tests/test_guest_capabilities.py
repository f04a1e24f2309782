"""The guest keeps only its own capabilities, and a job it starts holds none (guest/capabilities.py).

Each case runs in a fresh interpreter (capabilities are per thread and cannot be given back), as root, the way
the guest runs as its box's root: the sets are read back from /proc, never from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tkbox_daemon.box.backend import AGENT_CAPABILITIES, CAPABILITY_NUMBERS
from tkbox_guest import capabilities

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from tkbox_guest import capabilities

def status():
    fields = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    return {key: int(fields[key].strip(), 16) for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}

mode = sys.argv[2]
if mode == "missing":
    capabilities.restrict_to()  # as root: has everything, so this succeeds
    try:
        capabilities.restrict_to(capabilities.KEEP + (capabilities.CAP_SETPCAP,))  # setpcap was dropped
    except capabilities.CapabilityError as error:
        print(json.dumps({"refused": str(error)}))
    sys.exit(0)
capabilities.restrict_to()
guest = status()
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:  # as the guest starts an exec: no groups, then the job user
    os.setgroups([])
    os.setresgid(1000, 1000, 1000)
    os.setresuid(1000, 1000, 1000)
    os.write(write_end, json.dumps(status()).encode())
    os._exit(0)
os.close(write_end)
job = json.loads(os.read(read_end, 65536))
os.waitpid(pid, 0)
print(json.dumps({"guest": guest, "job": job}))
"""


def _probe(mode: str) -> dict:
    if os.geteuid() != 0:
        pytest.fail("the capability tests run as root, as the suite does")
    result = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), mode], capture_output=True, text=True,
                            check=True, timeout=60)
    return json.loads(result.stdout)


def test_the_guest_keeps_exactly_its_capabilities_and_empties_every_other_set():
    seen = _probe("restrict")["guest"]
    wanted = sum(1 << number for number in capabilities.KEEP)
    assert seen["CapPrm"] == seen["CapEff"] == wanted
    assert seen["CapBnd"] == seen["CapInh"] == seen["CapAmb"] == 0


def test_a_job_started_as_the_box_user_holds_no_capability_at_all():
    seen = _probe("restrict")["job"]
    assert seen == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}


def test_a_capability_the_guest_lacks_is_refused_with_the_reason():
    refused = _probe("missing")["refused"]
    assert "lacks capabilities" in refused and f"{1 << capabilities.CAP_SETPCAP:#x}" in refused


def test_the_launchers_grant_what_the_guest_keeps_plus_setpcap_to_drop_the_rest():
    granted = {CAPABILITY_NUMBERS[name] for name in AGENT_CAPABILITIES}
    assert granted == {*capabilities.KEEP, capabilities.CAP_SETPCAP}
