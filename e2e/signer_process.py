"""Drives the real ``tkbox`` command and a real signer process for end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TKBOX = str(Path(sys.executable).parent / "tkbox")


def tkbox(*args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([TKBOX, *args], capture_output=True, text=True, env=env or dict(os.environ),
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"tkbox {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def tkbox_json(*args: str, **kwargs: Any) -> Any:
    return json.loads(tkbox(*args, "--json", **kwargs).stdout)
