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
exec .venv/bin/python -m pytest -n 2 -p no:cacheprovider "$@"
