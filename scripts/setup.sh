#!/usr/bin/env bash
# Sets up tkbox on a Debian 12 machine (as root, or with sudo): the Debian packages it
# needs, then a virtual environment in .venv with tkbox and its test tools installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the product and its tests need; one list in one place (util-linux: mount, losetup, setpriv;
# e2fsprogs: mkfs.ext4, for each box's own disk; openssl: the TLS tests' client; linux-libc-dev: the kernel's
# syscall numbers the seccomp test checks its own against).
DEBIAN_PACKAGES=(python3-venv python3-pip git bubblewrap util-linux e2fsprogs iproute2 tmux curl openssl
                 linux-libc-dev)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# pip is quiet (-q); whatever else pip or setuptools says is shown, except two notes that are no problem: setuptools'
# "Editable installation." notice (an InformationOnly block, from its line to the one naming wheel_obj: the install is
# editable on purpose) and pip's "WARNING: Location … is ignored" for index locations a machine's pip.conf names but
# does not have.  A failed install stops the script (pipefail).
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | awk '
  /BuildBackendWarning: Editable installation\./ { skipping = 1 }
  !skipping && !/WARNING: Location .* is ignored/ && !/^[[:space:]]*$/ { print }
  skipping && /wheel_obj/ { skipping = 0 }'
.venv/bin/python -c 'import tkbox_daemon, tkbox_guest, tkbox_tui' || { echo "setup: tkbox did not install" >&2; exit 1; }
echo "setup: ready (.venv/bin/tkbox)"
