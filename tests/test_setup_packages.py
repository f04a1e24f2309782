"""setup.py lists every folder of the three packages, data-only ones included, so that setuptools has no package
to warn about ("Package 'tkbox_tui.console.styles' is absent from the `packages` configuration") and scripts/setup.sh
prints no warning."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_folder_of_the_packages_is_a_listed_package():
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_under_test")  # not __main__: nothing is built
    listed = set(setup["_packages"]())
    folders = set()
    for package, folder in setup["FOLDER_OF_PACKAGE"].items():
        for path in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if path.is_dir() and "__pycache__" not in path.parts:
                relative = path.relative_to(ROOT / folder).parts
                folders.add(".".join((package, *relative)))
    assert "tkbox_tui.console.styles" in folders
    assert folders == listed
