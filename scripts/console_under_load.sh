#!/usr/bin/env bash
# Runs the console's test files (tests/test_console_*.py) RUNS times in a row while a CPU hog keeps every core busy,
# and prints how many runs failed.  The console's tests used to fail only on a loaded machine (a render tick or a
# queued message falling inside Textual's shutdown); this is how to show they no longer do (docs/performance.md).
#
#   scripts/console_under_load.sh                 # 10 runs, one hog per core
#   RUNS=3 HOGS=4 scripts/console_under_load.sh   # other counts
#   scripts/console_under_load.sh tests/test_console_flows.py   # other test files
#
# Exit status: 0 when every run passed.  The log of each failed run is kept in $LOG_DIR (printed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-10}
HOGS=${HOGS:-$(nproc)}
LOG_DIR=${LOG_DIR:-$(mktemp -d -t console-under-load.XXXXXX)}
mkdir -p "$LOG_DIR"
if [ $# -gt 0 ]; then TESTS=("$@"); else TESTS=(tests/test_console_*.py); fi

hog_pids=()
pytest_pid=""
stop_all() {  # the hogs, and a test run still going when this script is interrupted
  for pid in "${hog_pids[@]}" $pytest_pid; do kill "$pid" 2>/dev/null || true; done
  for pid in "${hog_pids[@]}" $pytest_pid; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$HOGS"); do
  yes > /dev/null &
  hog_pids+=($!)
done

echo "console under load: $RUNS runs of pytest ${TESTS[0]} … (${#TESTS[@]} arguments), $HOGS CPU hogs on $(nproc) cores"
failures=0
for run in $(seq "$RUNS"); do
  log="$LOG_DIR/run-$run.log"
  started=$SECONDS
  .venv/bin/python -m pytest -p no:cacheprovider -q "${TESTS[@]}" > "$log" 2>&1 &
  pytest_pid=$!
  if wait "$pytest_pid"; then status=0; else status=$?; fi
  pytest_pid=""
  summary=$(grep -E '^[0-9]+ (passed|failed)|(passed|failed).* in [0-9.]+s' "$log" | tail -1 || true)
  if [ "$status" -eq 0 ]; then
    rm -f "$log"
    echo "run $run/$RUNS: passed ($summary) in $((SECONDS - started)) s"
  else
    failures=$((failures + 1))
    echo "run $run/$RUNS: FAILED ($summary) in $((SECONDS - started)) s; log: $log"
  fi
done
rm -f snapshot_report.html  # pytest-textual-snapshot writes it on a snapshot mismatch
echo "console under load: $failures of $RUNS runs failed"
[ "$failures" -eq 0 ] || { echo "logs of the failed runs: $LOG_DIR"; exit 1; }
rmdir "$LOG_DIR" 2>/dev/null || true
