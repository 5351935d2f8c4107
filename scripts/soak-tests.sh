#!/usr/bin/env bash
# The whole suite again and again, as CI runs it, on a busy machine: a fresh clone of
# this repository's HEAD (with ../shared beside it, as CI has it), built once, then the
# README's test command (`cargo test -- --test-threads=4`, with --no-fail-fast so that a run
# reports every test that failed) N times with two busy loops
# spinning beside it. Prints each run's result and every test that failed, then
# "soak: K of N runs passed"; exits non-zero unless all passed.
# Usage: scripts/soak-tests.sh [N]   (N: runs, default 5; BUSY=0 runs without the loops)
# The clone links this checkout's .venv when it is set up (torch is ~540 MB;
# SOAK_FRESH_VENV=1 makes its own); CARGO_TARGET_DIR, if set, is used as cargo uses it.
set -euo pipefail
runs=${1:-5}
busy=${BUSY:-2}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d /tmp/metapu-soak.XXXXXX)"
loops=()
cleanup() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT TERM

git clone -q "$root" "$work/metapu"
# shared/ beside the clone, as CI lays it (read-only there too).
ln -s "$(cd "$root/../shared" && pwd)" "$work/shared"
cd "$work/metapu"
if [[ "${SOAK_FRESH_VENV:-0}" != 1 && -e "$root/.venv/.metapu-setup" ]]; then
  ln -s "$root/.venv" .venv
fi
echo "soak: $(git log --oneline -1) in $work/metapu; $runs runs with $busy busy loops"
bash scripts/setup-while-building.sh >/dev/null
cargo build --tests --quiet 2>&1 | tail -20

for _ in $(seq "$busy"); do
  (while :; do :; done) &
  loops+=($!)
done

passed=0
for i in $(seq "$runs"); do
  log="$work/run-$i.log"
  started=$(date +%s)
  if cargo test --no-fail-fast -- --test-threads=4 >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "soak: run $i passed in $(($(date +%s) - started)) s"
  else
    echo "soak: run $i FAILED in $(($(date +%s) - started)) s:"
    grep -E '^test .* FAILED$|^    [a-z_:]+$|panicked at' "$log" | sort -u | sed 's/^/  /' || true
    cp "$log" "$root/target/soak-run-$i.log" 2>/dev/null && echo "  (log: target/soak-run-$i.log)"
  fi
done
echo "soak: $passed of $runs runs passed"
[[ "$passed" == "$runs" ]]
