"""Maps the fixed folders onto namespaced import names (daemon/ -> tkbox_daemon, guest/ -> tkbox_guest) and ships
the top-level ``themes/`` folder inside the console package (``tkbox_tui/console/shipped_themes``) when a wheel is
built; a checkout (editable install) reads ``themes/`` where it is.

Every folder of the three packages is a package here, data-only ones included (``tkbox_tui/console/styles``):
Python can import any folder, so setuptools warns about each one left out of ``packages``."""

from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

FOLDER_OF_PACKAGE = {"tkbox_tui": "tkbox_tui", "tkbox_daemon": "daemon", "tkbox_guest": "guest"}
THEMES_FOLDER = Path(__file__).resolve().parent / "themes"
SHIPPED_THEMES = Path("tkbox_tui") / "console" / "shipped_themes"  # must match tkbox_tui/console/themes.py


def _packages() -> list[str]:
    found = []
    for package, folder in FOLDER_OF_PACKAGE.items():
        found.append(package)
        found.extend(f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"]))
    return found


class BuildWithThemes(build_py):
    """``build_py`` that also copies ``themes/*.yaml`` into the built console package."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / SHIPPED_THEMES
        target.mkdir(parents=True, exist_ok=True)
        for theme in sorted(THEMES_FOLDER.glob("*.yaml")):
            self.copy_file(str(theme), str(target / theme.name))


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import _packages() without building
    setup(packages=_packages(), package_dir=dict(FOLDER_OF_PACKAGE), cmdclass={"build_py": BuildWithThemes})
