#!/usr/bin/env bash
# `make package-test`: the .deb and the tarball that `make package` wrote, checked the way
# an operator's host would see them: unpacked into an empty directory and run with an
# environment that holds no venv, no LIBTORCH and no Rust. Ends by recording the hash of
# the package inputs in packaging/tested-inputs (.ci/run runs this when they change).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
deb="target/debian/metapu_${version}_amd64.deb"
tarball="target/metapu-${version}-x86_64-linux.tar.gz"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tree="$work/deb"
fail() { echo "package-test: FAILED: $*" >&2; exit 1; }
ok() { echo "package-test: ok: $*"; }
clean() { env -i PATH=/usr/bin:/bin "$@"; }

dpkg-deb -x "$deb" "$tree"
bin="$tree/usr/bin/metapu"
model="$tree/usr/share/metapu/models/iot-default.safetensors"

# What the package holds.
for f in usr/bin/metapu usr/lib/metapu/libtorch_cpu.so usr/lib/metapu/libc10.so etc/metapu/metapu.toml \
  usr/lib/systemd/system/metapu.service usr/lib/systemd/system/metapu-sense.service \
  usr/lib/systemd/system/metapu-console.service \
  usr/share/metapu/models/iot-default.safetensors \
  usr/share/metapu/dashboards/metapu.json usr/share/metapu/dashboards/prometheus-scrape.yaml \
  usr/share/doc/metapu/changelog.Debian.gz usr/share/doc/metapu/copyright; do
  [[ -e "$tree/$f" ]] || fail "missing /$f"
done
ls "$tree/usr/lib/metapu" | grep -q libtorch_cuda && fail "libtorch_cuda in the CPU package"
dpkg-deb -f "$deb" Package Version Architecture Depends
[[ "$(dpkg-deb -I "$deb" conffiles)" == "/etc/metapu/metapu.toml" ]] || fail "conffiles: $(dpkg-deb -I "$deb" conffiles)"
dpkg-deb -I "$deb" postinst | grep -v '^ *#' | grep -Eq 'systemctl (enable|start)' &&
  fail "postinst enables or starts the service"
ok "contents, conffile, maintainer scripts"

# The libraries: every one resolved inside the package or in the base system.
[[ "$(readelf -d "$bin" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')" == '$ORIGIN/../lib/metapu' ]] ||
  fail "rpath: $(readelf -d "$bin" | grep -i path)"
for elf in "$bin" "$tree"/usr/lib/metapu/*.so*; do
  deps="$(clean ldd "$elf")"
  if grep -q "not found" <<<"$deps"; then fail "ldd $elf: $(grep 'not found' <<<"$deps")"; fi
  outside="$(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$deps" | grep -v "^$tree/" | grep -Ev '^/(usr/)?lib(64)?/' || true)"
  [[ -z "$outside" ]] || fail "ldd $elf resolves outside the package and the base system: $outside"
done
ok "ldd: every library in the package or the base system"

# The binary as an operator runs it.
clean "$bin" --version | grep -qx "metapu $version (cpu build)" || fail "--version: $(clean "$bin" --version)"
shown="$(clean "$bin" check-config --config "$tree/etc/metapu/metapu.toml")"
grep -q '^path = "/usr/share/metapu/models/iot-default.safetensors"$' <<<"$shown" || fail "check-config: $shown"
shown="$(clean METAPU_KAFKA_SASL_PASSWORD=hunter2 "$bin" check-config --config "$tree/etc/metapu/metapu.toml")"
grep -q '^"sasl.password" = "<redacted>"$' <<<"$shown" || fail "secret from the environment: $shown"
mkdir -m 700 "$work/credentials" && printf 'hunter2\n' >"$work/credentials/ssl.key.password"
shown="$(clean CREDENTIALS_DIRECTORY="$work/credentials" "$bin" check-config --config "$tree/etc/metapu/metapu.toml")"
grep -q '^"ssl.key.password" = "<redacted>"$' <<<"$shown" || fail "secret from a systemd credential: $shown"
info="$(clean "$bin" info "$model")"
grep -q '^features     115 ' <<<"$info" || fail "info: $info"
grep -q '^compute      CPU$' <<<"$info" || fail "info: $info"
clean "$bin" sense --help | grep -q -- '--interface' || fail "sense --help"
refusal="$(clean "$bin" sense --interface metapu-none0 --devices /dev/null --discover 2>&1)" && fail "sense on no interface ran"
grep -q "cannot capture on 'metapu-none0'" <<<"$refusal" || fail "sense on no interface: $refusal"
ok "--version, check-config (secrets from the environment and from a credential), info, sense (libpcap loads)"

# The unit, with its paths moved into the unpacked tree.
# The sensor keeps CAP_NET_RAW and CAP_NET_ADMIN (capture), hence its higher bound.
if command -v systemd-analyze >/dev/null; then
  for unit_bound in metapu.service:1.2 metapu-sense.service:2.0 metapu-console.service:1.2; do
    name="${unit_bound%%:*}" bound="${unit_bound##*:}"
    unit="$work/$name"
    sed "s|/usr/bin/metapu|$bin|g" "$tree/usr/lib/systemd/system/$name" >"$unit"
    verify="$(systemd-analyze verify "$unit" 2>&1)" || fail "systemd-analyze verify $name: $verify"
    exposure="$(systemd-analyze security --offline=true "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')"
    awk -v e="$exposure" -v b="$bound" 'BEGIN { exit !(e != "" && e <= b) }' ||
      fail "systemd-analyze security $name: exposure '$exposure' > $bound"
    ok "systemd-analyze verify $name; security exposure $exposure (≤ $bound)"
  done
else
  echo "package-test: SKIPPED the unit checks: systemd-analyze is not on this host" >&2
fi

# The tarball: its sha256, the same tree, a binary that runs from it.
(cd target && sha256sum --quiet -c "$(basename "$tarball").sha256") || fail "tarball sha256"
(cd target/debian && sha256sum --quiet -c "$(basename "$deb").sha256") || fail ".deb sha256"
tar -C "$work" -xzf "$tarball"
diff -r "$tree" "$work/metapu-$version" >/dev/null || fail "the tarball's tree differs from the .deb's"
clean "$work/metapu-$version/usr/bin/metapu" --version >/dev/null || fail "the tarball's binary does not run"
ok "tarball: sha256, same tree as the .deb, runs"

# The unpacked daemon and replay against the bundled broker on the real Danmini rows.
METAPU_PACKAGED_ROOT="$tree" cargo test --test integration -- --ignored packaged_
ok "the packaged daemon scores the real Danmini rows; its three units run together on one host"

bash scripts/package-inputs.sh >packaging/tested-inputs
echo "package-test: passed; package inputs $(cat packaging/tested-inputs)"
