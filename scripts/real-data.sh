#!/usr/bin/env bash
# The real-traffic benchmark's inputs (docs/results.md, "Real traffic"): every device
# of IoT Sentinel (its setup captures concatenated) and every host of Kitsune's camera
# network, each made infected with each real attack capture by `metapu datasets
# infect` (the attack starts halfway through the device's traffic). Writes, per
# (device, attack): NAME.pcap, NAME.labels.csv and NAME.mac into OUT.
# Usage: scripts/real-data.sh OUT [NAME=ATTACK.pcap …]   (METAPU and PCAP may point elsewhere)
# Without NAME=ATTACK arguments, the three real attack captures. SKIP="DEVICE …" leaves
# those devices out; ONLY="DEVICE …" makes those alone.
set -euo pipefail
out=${1:?usage: scripts/real-data.sh OUT [NAME=ATTACK.pcap …]}
shift
metapu=${METAPU:-target/release/metapu}
pcap=${PCAP:-../shared/data/pcap}
mkdir -p "$out"

attacks=(
  "syn-scan=$pcap/ndpi/synscan.pcap"
  "icmp-sweep=$pcap/stratosphere/test12-icmp-portscan.pcap"
  "tcp-scan=$pcap/ndpi/tcp_scan.pcapng"
)
if (($#)); then attacks=("$@"); fi

infect() { # name mac how benign... (how: --concatenate, or --start 0.5 alone)
  local name=$1 mac=$2 how=$3
  shift 3
  [[ " ${SKIP:-} " == *" $name "* ]] && return
  [[ -n ${ONLY:-} && " $ONLY " != *" $name "* ]] && return
  for a in "${attacks[@]}"; do
    local kind=${a%%=*} file=${a#*=}
    "$metapu" datasets infect $how --benign "$@" --device-mac "$mac" --attack "$file" --start 0.5 \
      --out "$out/$name.$kind.pcap" >/dev/null
    echo "$mac" >"$out/$name.$kind.mac"
  done
}

for dir in "$pcap"/iot-sentinel/*/; do
  name=$(basename "$dir")
  infect "sentinel-$name" "$(tr -d '[:space:]' <"$dir/_iotdevice-mac.txt")" --concatenate "$dir"/Setup-*.pcap
done

# Kitsune's capture is a whole LAN: every host that sends IPv4 (the cameras, the
# gateway) is a device in turn.
camera=$pcap/kitsune/mirai2000.pcap
hosts=$(python3 - "$camera" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:4] == bytes.fromhex("d4c3b2a1"), "classic little-endian pcap expected"
at, macs = 24, set()
while at + 16 <= len(data):
    captured = struct.unpack("<I", data[at + 8 : at + 12])[0]
    frame = data[at + 16 : at + 16 + captured]
    at += 16 + captured
    if frame[12:14] == b"\x08\x00":
        macs.add(frame[6:12].hex(":"))
print("\n".join(sorted(macs)))
PY
)
for mac in $hosts; do
  infect "kitsune-${mac//:/}" "$mac" "" "$camera"
done
echo "real-data: $(ls "$out"/*.pcap | wc -l) infected captures in $out"
