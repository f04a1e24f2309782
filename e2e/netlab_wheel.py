"""The one package the lab's index serves: ``tkbox-netlab-probe``, a pure-Python wheel with one module, built here
without a network (no build backend to fetch) so ``pip install --index-url …/simple tkbox-netlab-probe`` has
something real to install.

A wheel is a zip of the module plus a ``.dist-info`` folder (METADATA, WHEEL, RECORD with each file's sha256,
PEP 427 / PEP 376); entries carry a fixed timestamp, so the same inputs give the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PROBE_PROJECT = "tkbox-netlab-probe"
PROBE_VERSION = "1.0"
PROBE_MODULE = "tkbox_netlab_probe"
PROBE_MARKER = "tkbox netlab probe installed"
"""What ``tkbox_netlab_probe.MARKER`` holds once installed: a test imports it to prove the install worked."""

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


def probe_wheel_name() -> str:
    return f"{PROBE_MODULE}-{PROBE_VERSION}-py3-none-any.whl"


def build_probe_wheel(directory: Path) -> Path:
    """Write the probe wheel into ``directory`` and return its path."""
    dist_info = f"{PROBE_MODULE}-{PROBE_VERSION}.dist-info"
    files = {
        f"{PROBE_MODULE}.py": f'"""Installed by the tkbox network lab\'s e2e tests."""\n\nMARKER = {PROBE_MARKER!r}\n',
        f"{dist_info}/METADATA": (f"Metadata-Version: 2.1\nName: {PROBE_PROJECT}\nVersion: {PROBE_VERSION}\n"
                                  "Summary: A probe package served by the tkbox network lab\n"),
        f"{dist_info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: tkbox-e2e-netlab\nRoot-Is-Purelib: true\n"
                               "Tag: py3-none-any\n"),
    }
    record = "".join(f"{name},{_record_hash(text.encode())},{len(text.encode())}\n" for name, text in files.items())
    files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    wheel = directory / probe_wheel_name()
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            entry = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, text, compress_type=zipfile.ZIP_DEFLATED)
    return wheel


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"
