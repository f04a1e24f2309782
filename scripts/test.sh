#!/usr/bin/env bash
# Sets up tkbox (scripts/setup.sh), then runs the linters, the import-boundary contracts
# and the whole test suite, unit and end-to-end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== import boundaries"
.venv/bin/lint-imports
echo "== tests"
# three workers on two cores: the end-to-end tests spend much of their time waiting on boxes, daemons and disks;
# worksteal: a worker that runs out of tests takes pending ones from another (the long end-to-end tests come last)
exec .venv/bin/python -m pytest -n 3 --dist worksteal -p no:cacheprovider "$@"
