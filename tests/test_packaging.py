"""A built wheel carries everything tkbox reads at run time, and finds it without the checkout.

The README installs tkbox editable from the checkout; a wheel (``pip install .``, or a package built from it) must
work as well: the policy packs, the console's styles and shipped themes (copied from the top-level ``themes/``
by setup.py) and the guest agent's package that the daemon installs into boxes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh interpreter without site (so without the editable install's finder), the wheel's files first.
PROBE = r"""
import json, sys
from pathlib import Path
from tkbox_daemon.policy import load_pack
from tkbox_daemon.boxes.manager import GUEST_DIR
from tkbox_tui.console import app
from tkbox_tui.console.themes import SHIPPED_THEMES_DIR, load_themes
themes, failures = load_themes(SHIPPED_THEMES_DIR)
print(json.dumps({
    "packs": [load_pack(name).name for name in ("default", "coding")],
    "guest_dir": str(GUEST_DIR), "guest_main": (GUEST_DIR / "__main__.py").is_file(),
    "themes_dir": str(SHIPPED_THEMES_DIR), "themes": sorted(theme.name for theme in themes),
    "theme_failures": len(failures),
    "styles": [(Path(app.__file__).parent / css).is_file() for css in app.ConsoleApp.CSS_PATH],
}))
"""


def test_a_wheel_installed_elsewhere_finds_its_packs_styles_themes_and_guest(tmp_path):
    # pip builds in the source tree (build/): build from a clean copy, so nothing stale is packed and the
    # checkout is left alone.
    source, wheels, target = tmp_path / "source", tmp_path / "wheels", tmp_path / "site"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "tests", "e2e", "bench"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)], check=True,
                   capture_output=True, timeout=240)
    (wheel,) = wheels.glob("tkbox-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"tkbox_tui/console/shipped_themes/{theme.name}" for theme in (ROOT / "themes").glob("*.yaml")} <= names
    subprocess.run([*pip, "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True,
                   capture_output=True, timeout=240)
    dependencies = sysconfig.get_paths()["purelib"]  # textual, aiohttp, ... of this venv; not its editable finder
    result = subprocess.run([sys.executable, "-S", "-c", PROBE], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env={"PYTHONPATH": f"{target}:{dependencies}", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["packs"] == ["default", "coding"]
    assert found["guest_dir"] == str(target / "tkbox_guest") and found["guest_main"]
    assert found["themes_dir"] == str(target / "tkbox_tui" / "console" / "shipped_themes")
    assert found["themes"] == ["tkbox-dark", "tkbox-high-contrast", "tkbox-light"] and found["theme_failures"] == 0
    assert found["styles"] == [True, True]
