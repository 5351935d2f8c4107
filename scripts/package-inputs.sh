#!/usr/bin/env bash
# The hash of what goes into the package, beyond the code: `make package-test` records it
# in packaging/tested-inputs, and .ci/run runs the package test when it no longer matches.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
git ls-files -z Cargo.toml Cargo.lock build.rs packaging systemd config dashboards models/iot-default.safetensors \
  scripts/setup.sh scripts/package-setup.sh scripts/package.sh scripts/package-test.sh scripts/package-inputs.sh |
  grep -zv '^packaging/tested-inputs$' | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
