"""What the guest loads before its first request: no TLS (it never speaks it; asyncio would load OpenSSL for
nothing), no OpenSSL hashes and no diff code (both loaded on the first diff or file read), no dataclasses and,
started without options as in a box, no argparse; so a box's PID 1 starts sooner. With options it parses them as
before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tkbox_guest
from tkbox_guest.__main__ import DEFAULTS, parse_args

GUEST_PARENT = Path(tkbox_guest.__file__).resolve().parents[1]
PROBE = """
import sys
sys.path.append({parent!r})
from {package}.__main__ import main
code = main([])  # as in a box: no options; the host has no /run/tkbox/boot.sock
loaded = [name for name in ("ssl", "_ssl", "_hashlib", "argparse", "dataclasses", "{package}.diff", "{package}.gitpatch", "asyncio")
          if sys.modules.get(name) is not None]
print(code, *loaded)
"""


def test_the_guest_loads_neither_tls_nor_the_diff_code_before_its_first_request():
    package = Path(tkbox_guest.__file__).resolve().parent.name
    probe = PROBE.format(parent=str(GUEST_PARENT), package=package)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=60)
    assert "cannot read the boot socket" in done.stderr  # it went as far as its boot config: the agent is loaded
    assert done.stdout.split() == ["1", "asyncio"]



@pytest.mark.parametrize("argv, expected", [
    ([], vars(DEFAULTS)),
    (["--boot-socket", "/b.sock", "--agent-socket", "/a.sock", "--drain-ms", "5", "--no-forwarder"],
     {"boot_socket": "/b.sock", "agent_socket": "/a.sock", "drain_ms": 5, "no_forwarder": True}),
    (["--no-forwarder"], {**vars(DEFAULTS), "no_forwarder": True}),
])
def test_the_options_without_argparse_loaded_are_the_ones_argparse_gives(argv, expected):
    assert vars(parse_args(argv)) == expected


@pytest.mark.parametrize("argv", [["--drain-ms", "soon"], ["--unknown"], ["extra"]])
def test_a_bad_option_is_still_refused_by_name(argv, capsys):
    with pytest.raises(SystemExit) as refused:
        parse_args(argv)
    assert refused.value.code == 2 and "tkbox-guest" in capsys.readouterr().err
