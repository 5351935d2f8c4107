#!/usr/bin/env bash
# How far a record and a verdict walk through the monitor (examples/walk.rs), counted
# by callgrind on a debug build, where nothing is inlined: the functions of the
# project's own that one walk enters, and the calls to them.
#   scripts/walk-count.sh [--list]     (needs valgrind and ../shared)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "walk-count needs valgrind (apt install valgrind)" >&2; exit 1; }
cargo build --example walk
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
grind() {
    valgrind --tool=callgrind --zero-before=walk::begin_measure --dump-after=walk::end_measure \
        --compress-strings=no --compress-pos=no --callgrind-out-file="$out/$1" \
        target/debug/examples/walk 2>"$out/$1.log"
}
WALK_THRESHOLD=0 WALK_RECORDS=200 grind record
WALK_RECORDS=0 grind verdict
echo "a record (200 of one adapted device, scored normal, one message a batch):"
python3 scripts/walk_count.py "$(ls "$out"/record.* | grep -v log | sort | tail -1)" "$PWD" 200 "$@"
echo "a false-positive verdict on an open incident:"
python3 scripts/walk_count.py "$(ls "$out"/verdict.* | grep -v log | sort | tail -1)" "$PWD" 1 "$@"
