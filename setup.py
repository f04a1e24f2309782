"""Maps the fixed folders onto namespaced import names: daemon/ -> tkbox_daemon, guest/ -> tkbox_guest."""

from setuptools import find_packages, setup

FOLDER_OF_PACKAGE = {"tkbox_tui": "tkbox_tui", "tkbox_daemon": "daemon", "tkbox_guest": "guest"}


def _packages() -> list[str]:
    found = []
    for package, folder in FOLDER_OF_PACKAGE.items():
        found.append(package)
        found.extend(f"{package}.{sub}" for sub in find_packages(folder))
    return found


def _package_dirs() -> dict[str, str]:
    return dict(FOLDER_OF_PACKAGE)


setup(packages=_packages(), package_dir=_package_dirs())
