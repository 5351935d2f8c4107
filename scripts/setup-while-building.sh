#!/usr/bin/env bash
# `make test`'s first step: scripts/setup.sh, and on a clone where setup has not run yet,
# the compilation of everything that does not need libtorch at the same time. Setup
# spends its time downloading torch (~540 MB) with the CPU idle; meanwhile cargo builds
# librdkafka and the Rust dependencies, for clippy (check) and for the tests (`cargo
# build --tests`, whose units `cargo test` reuses), with --keep-going past what needs
# libtorch. The steps after setup then start warm. Where setup has run before, this is
# scripts/setup.sh alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo=${CARGO:-cargo}
if [[ -e .venv/libtorch/lib/libtorch_cpu.so ]]; then
  exec bash scripts/setup.sh
fi

# libpcap first: the pcap crate's build script looks for it.
bash scripts/setup.sh --system-only
mkdir -p target
log=target/setup-while-building.log
echo "setup: compiling what does not need libtorch meanwhile (log: $log)"
# Failures are expected here (torch-sys and everything above it need the venv); the
# build after setup reports any real one.
( "$cargo" clippy --all-targets --keep-going --quiet || true
  "$cargo" build --tests --keep-going --quiet || true ) >"$log" 2>&1 &
building=$!
# Should setup fail, the build stops with it.
trap 'pkill -P "$building" 2>/dev/null; kill "$building" 2>/dev/null || true' EXIT

bash scripts/setup.sh
wait "$building" || true
trap - EXIT
