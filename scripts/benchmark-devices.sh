#!/usr/bin/env bash
# The devices of the real-traffic benchmark (docs/results.md, "Real traffic"), a line
# each: NAME MAC HOW CAPTURE… — every device of IoT Sentinel (HOW --concatenate: its
# setup captures one after the other) and every host of Kitsune's camera network that
# sends IPv4 (HOW -: the one capture). scripts/real-data.sh infects them with the real
# attacks; scripts/source-data.sh can take some as meta-training sources.
#
#   scripts/benchmark-devices.sh   (PCAP may point elsewhere)
set -euo pipefail
pcap=${PCAP:-../shared/data/pcap}

for dir in "$pcap"/iot-sentinel/*/; do
  echo "sentinel-$(basename "$dir") $(tr -d '[:space:]' <"$dir/_iotdevice-mac.txt") --concatenate" "$dir"Setup-*.pcap
done

# Kitsune's capture is a whole LAN: every host that sends IPv4 (the cameras, the
# gateway) is a device in turn.
camera=$pcap/kitsune/mirai2000.pcap
python3 - "$camera" <<'PY'
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
for mac in sorted(macs):
    print(f"kitsune-{mac.replace(':', '')} {mac} - {sys.argv[1]}")
PY
