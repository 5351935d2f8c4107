#!/usr/bin/env bash
# `make package`: the .deb (cargo-deb, from [package.metadata.deb] in Cargo.toml) and a
# tarball of the same tree for hosts without dpkg, each with its sha256.
#
# What is staged under target/package-stage/ before cargo-deb packs it:
#   metapu        the release binary without debug info, its rpath set to
#                 $ORIGIN/../lib/metapu (patchelf) instead of the build host's venv
#   lib/          the libraries it links from libtorch, and nothing else: ldd on the
#                 venv build names them (libtorch_cpu, libc10, libgomp, and the two small
#                 CUDA runtime libraries libtorch_cpu pulls in); their own rpath is $ORIGIN
#   metapu.toml   config/default.toml with model.path at the shipped model
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools="$root/.tools/bin"
stage=target/package-stage
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
deb="target/debian/metapu_${version}_amd64.deb"
tarball="target/metapu-${version}-x86_64-linux.tar.gz"
model_dest=/usr/share/metapu/models/iot-default.safetensors

rm -rf "$stage" && mkdir -p "$stage/lib"

# The libraries: whatever ldd resolves inside the venv's libtorch tree.
ldd target/release/metapu | awk '$3 ~ /\.venv/ {print $3}' | while read -r lib; do
  cp -L "$lib" "$stage/lib/"
done
for want in libtorch_cpu.so libc10.so; do
  [[ -f "$stage/lib/$want" ]] || { echo "package: $want not among the linked libraries" >&2; exit 1; }
done
if ls "$stage/lib" | grep -q '^libtorch_cuda'; then
  echo "package: the CPU package must not carry libtorch_cuda (build without --features cuda)" >&2
  exit 1
fi

objcopy --strip-debug target/release/metapu "$stage/metapu"
"$tools/patchelf" --set-rpath '$ORIGIN/../lib/metapu' "$stage/metapu"

# The packaged header replaces default.toml's leading comment block, whatever its length.
{
  cat <<'EOF'
# metapu daemon configuration, installed by the package (a conffile: upgrades keep your
# changes). Every key with its default; METAPU__SECTION__KEY variables override it.
# `metapu check-config` validates and prints the effective configuration. Set
# kafka.brokers, then `systemctl enable --now metapu`.
EOF
  awk 'header && /^#/ {next} {header = 0; print}' header=1 config/default.toml |
    sed "s|^path = \"/var/lib/metapu/model.safetensors\"|path = \"$model_dest\"|"
} >"$stage/metapu.toml"
grep -q "^path = \"$model_dest\"" "$stage/metapu.toml" || { echo "package: model.path not set in metapu.toml" >&2; exit 1; }

"$tools/cargo-deb" --no-build --no-strip --output "$deb"

# The tarball: the .deb's tree under metapu-<version>/.
tree="$stage/tar/metapu-$version"
mkdir -p "$tree"
dpkg-deb -x "$deb" "$tree"
tar -C "$stage/tar" --owner=0 --group=0 --numeric-owner -czf "$tarball" "metapu-$version"
for f in "$deb" "$tarball"; do
  (cd "$(dirname "$f")" && sha256sum "$(basename "$f")" >"$(basename "$f").sha256")
done
ls -l "$deb" "$tarball"
echo "package: installed size $(dpkg-deb -f "$deb" Installed-Size) KiB"
