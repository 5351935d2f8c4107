#!/usr/bin/env bash
# Runs a test command (the Makefile's `cargo test`) under a time limit. A test that hangs
# then fails the run within TEST_LIMIT (default 50 min, well inside CI's 90), and the
# tests still running are named last, where CI shows its output's tail.
set -uo pipefail
limit=${TEST_LIMIT:-50m}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout --kill-after=30s "$limit" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [[ $status == 124 || $status == 137 ]]; then
  echo "tests: stopped at the limit of $limit; running for over 60 s and never finished:"
  grep -oE '^test [^ ]+ has been running' "$log" | awk '{print $2}' | sort -u | while read -r t; do
    grep -qE "^test $t \.\.\. " "$log" || echo "  $t"
  done
fi
exit "$status"
