"""The three import worlds stay apart: guest/ is standard library only, daemon/ never loads Textual or the
console, and the console reaches the daemon only through its wire schema.

import-linter checks the static imports (``lint-imports`` in scripts/test.sh); these tests import each module in a
fresh interpreter and look at ``sys.modules``, which also catches imports that static analysis cannot see.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package_dir: Path, prefix: str) -> list[str]:
    names = [prefix]
    for info in pkgutil.walk_packages([str(package_dir)], prefix + "."):
        names.append(info.name)
    return names


def _loaded_after_import(module: str, *, isolated: bool = False) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        + (f"sys.path.insert(0, {str(ROOT)!r})\n" if isolated else "")
        + f"importlib.import_module({module!r})\n"
        + "print(json.dumps(sorted(sys.modules)))\n"
    )
    flags = ["-I", "-S"] if isolated else ["-I"]
    result = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


GUEST_MODULES = _modules(ROOT / "guest", "guest")
DAEMON_MODULES = _modules(ROOT / "daemon", "tkbox_daemon")


@pytest.mark.parametrize("module", GUEST_MODULES)
def test_guest_modules_load_only_the_standard_library(module):
    # Run without site-packages (-S) and from the bare folder, as the guest runs inside a box.
    loaded = _loaded_after_import(module, isolated=True)
    outside = {name.split(".")[0] for name in loaded} - set(sys.stdlib_module_names) - {"guest", "__main__"}
    assert not outside, f"{module} loads non-stdlib modules: {sorted(outside)}"


# What the daemon shares with the guest: the wire codec, the patch code the host runs over the box's layers, and the
# relay lanes of the egress proxy and the forwarder.
SHARED_GUEST_PARTS = [["tkbox_guest", part] for part in ("protocol", "diff", "gitpatch", "layers", "lanes")]


@pytest.mark.parametrize("module", [m for m in DAEMON_MODULES if not m.endswith("__main__")])
def test_daemon_modules_never_load_textual_or_the_console(module):
    loaded = _loaded_after_import(module)
    forbidden = {name for name in loaded if name.split(".")[0] in {"textual", "tkbox_tui", "tkbox_guest"}}
    forbidden = {name for name in forbidden if name != "tkbox_guest" and name.split(".")[:2] not in SHARED_GUEST_PARTS}
    assert not forbidden, f"{module} loads {sorted(forbidden)}"


def test_console_modules_load_no_daemon_internals_beyond_the_wire_schema():
    console_modules = _modules(ROOT / "tkbox_tui" / "console", "tkbox_tui.console")
    for module in console_modules:
        loaded = _loaded_after_import(module)
        daemon_parts = {name for name in loaded if name.startswith("tkbox_daemon")}
        allowed = {"tkbox_daemon", "tkbox_daemon.wire", "tkbox_daemon.wire_apply", "tkbox_daemon.wire_egress",
                   "tkbox_daemon.wire_host", "tkbox_daemon.wire_record",
                   "tkbox_daemon.fsutil",
                   "tkbox_daemon.limits"}  # standard library only: the API client's caps on what it reads
        assert daemon_parts <= allowed, f"{module} loads {sorted(daemon_parts)}"


def test_the_import_contracts_hold():
    result = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken" in result.stdout
