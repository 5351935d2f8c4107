#!/usr/bin/env bash
# Every benign capture in the shared data, for the looks' false incidents
# (docs/results.md, "The looks on benign traffic"): each benchmark device (IoT
# Sentinel's setups concatenated, each host of Kitsune's camera network) and each of
# nDPI's consumer-IoT captures (its device: the MAC that sends the most frames). The
# metapu-lab week tool reads labeled captures, so nDPI's 28-packet TCP scan is appended
# after the last benign packet (--start 1): every incident before it is on benign traffic.
# Writes NAME.pcap, NAME.labels.csv and NAME.mac into OUT.
# Usage: scripts/benign-data.sh OUT   (METAPU and PCAP may point elsewhere)
set -euo pipefail
out=${1:?usage: scripts/benign-data.sh OUT}
metapu=${METAPU:-target/release/metapu}
pcap=${PCAP:-../shared/data/pcap}
mkdir -p "$out"
marker=$pcap/ndpi/tcp_scan.pcapng

# The source MAC of most Ethernet frames in a classic pcap or pcapng.
busiest_mac() {
  python3 - "$1" <<'PY'
import collections, struct, sys
d = open(sys.argv[1], "rb").read()
frames = []
if d[:4] == b"\x0a\x0d\x0d\x0a":
    o = 0
    while o + 12 <= len(d):
        kind, size = struct.unpack("<II", d[o:o + 8])
        if size < 12:
            break
        if kind == 6:  # enhanced packet block
            caplen = struct.unpack("<I", d[o + 20:o + 24])[0]
            frames.append(d[o + 28:o + 28 + caplen])
        o += size
else:
    order = "<" if d[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    o = 24
    while o + 16 <= len(d):
        incl = struct.unpack(order + "I", d[o + 8:o + 12])[0]
        frames.append(d[o + 16:o + 16 + incl])
        o += 16 + incl
count = collections.Counter(f[6:12] for f in frames if len(f) >= 14)
print(":".join(f"{b:02x}" for b in count.most_common(1)[0][0]))
PY
}

add() { # name mac how benign...
  local name=$1 mac=$2 how=$3
  shift 3
  # shellcheck disable=SC2086 # $how is one flag or none
  "$metapu" datasets infect $how --benign "$@" --device-mac "$mac" --attack "$marker" --start 1 \
    --out "$out/$name.pcap" >/dev/null
  echo "$mac" >"$out/$name.mac"
}

while read -r -u 3 name mac how files; do
  [[ $how == - ]] && how=
  # shellcheck disable=SC2086 # the capture paths hold no spaces
  add "$name" "$mac" "$how" $files
done 3< <(PCAP=$pcap bash "$(dirname "$0")/benchmark-devices.sh")
for f in alexa-app.pcapng nest_log_sink.pcap tplink_shp.pcap tuya_lp.pcap sonos.pcapng xiaomi.pcap \
  ssdp-m-search.pcap upnp.pcap telnet.pcap; do
  add "ndpi-${f%%.*}" "$(busiest_mac "$pcap/ndpi/$f")" "" "$pcap/ndpi/$f"
done
echo "benign-data: $(ls "$out"/*.pcap | wc -l) benign captures (a marker scan after each) in $out"
