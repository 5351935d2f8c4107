#!/usr/bin/env bash
# make week-results' inputs: the week-long captures of ../shared/data/pcap/week (three
# real devices, a week of their own traffic each), as they are (OUT/clean) and with an
# attack merged in at a quarter, half and three quarters of the week (OUT/attacked):
# the three real attack captures and two simulated floods (`metapu datasets attack`,
# 1 s each). OUT/repeated: each of those and two simulated attacks written as the wire
# has them (an ARP sweep of the LAN, an SSH password guesser: issue #75) merged twice,
# at a quarter and again 3 days later, and at half and again 1 hour later: what the
# daemon learned of an unanswered first wave may not hide the second. OUT/first-hour:
# each of the five attacks merged 1, 10 and 30 min after the capture's first packet (the
# device's onboarding: its first records), inside its learning period; OUT/first-hour-6h,
# the same 6 h later (the first hour after `metapu onboard --for 6h`). OUT/never-learned:
# what learning must never take (issue #96), each merged at a quarter of the week and
# again 3 days later, nobody answering: 50 MiB uploaded to a public host the device never
# used, a TLS check-in every minute for two days to another, and ten times the most the
# device sent its busiest public peer in 5 minutes, to that peer (its own cloud:
# scripts/usual-upload.py). Writes NAME.pcap,
# NAME.mac (and NAME.labels.csv for the attacked ones).
# Usage: scripts/week-data.sh OUT   (METAPU and PCAP may point elsewhere)
set -euo pipefail
out=${1:?usage: scripts/week-data.sh OUT}
metapu=${METAPU:-target/release/metapu}
pcap=${PCAP:-../shared/data/pcap}
mkdir -p "$out/clean" "$out/attacked" "$out/repeated" "$out/first-hour" "$out/first-hour-6h" "$out/never-learned" \
  "$out/attacks"

# A classic pcap's first packet time (Unix seconds).
first_packet() {
  python3 - "$1" <<'PY'
import struct, sys
head = open(sys.argv[1], "rb").read(32)
order = {b"\xd4\xc3\xb2\xa1": ("<", 1e6), b"\xa1\xb2\xc3\xd4": (">", 1e6),
         b"\x4d\x3c\xb2\xa1": ("<", 1e9), b"\xa1\xb2\x3c\x4d": (">", 1e9)}.get(head[:4])
if order is None or len(head) < 32:
    sys.exit(f"{sys.argv[1]}: not a classic pcap with a packet")
sec, frac = struct.unpack(order[0] + "II", head[24:32])
print(f"{sec + frac / order[1]:.6f}")
PY
}

attacks=(
  "syn-scan=$pcap/ndpi/synscan.pcap"
  "icmp-sweep=$pcap/stratosphere/test12-icmp-portscan.pcap"
  "tcp-scan=$pcap/ndpi/tcp_scan.pcapng"
)
for kind in mirai.syn gafgyt.udp; do
  "$metapu" datasets attack --kind "$kind" --duration 1 --seed 1 --out "$out/attacks/$kind.pcap" >/dev/null
  attacks+=("$kind=$out/attacks/$kind.pcap")
done
repeated=("${attacks[@]}")
for a in arp.sweep=15 ssh.bruteforce=60; do
  kind=${a%%=*} seconds=${a#*=}
  "$metapu" datasets attack --kind "$kind" --duration "$seconds" --seed 1 --out "$out/attacks/$kind.pcap" >/dev/null
  repeated+=("$kind=$out/attacks/$kind.pcap")
done

"$metapu" datasets attack --kind upload --duration 600 --seed 1 --out "$out/attacks/upload-stranger.pcap" >/dev/null
"$metapu" datasets attack --kind beacon.slow --duration 172800 --seed 1 --out "$out/attacks/beacon-slow.pcap" >/dev/null

for capture in "$pcap"/week/*.pcap; do
  device=$(basename "$capture" .pcap)
  mac=$(tr -d '[:space:]' <"$pcap/week/$device.mac")
  cp "$capture" "$out/clean/$device.pcap"
  echo "$mac" >"$out/clean/$device.mac"
  for a in "${attacks[@]}"; do
    kind=${a%%=*} file=${a#*=}
    for start in 0.25 0.5 0.75; do
      name=$device.$kind.at$start
      "$metapu" datasets infect --benign "$capture" --device-mac "$mac" --attack "$file" --start "$start" \
        --out "$out/attacked/$name.pcap" >/dev/null
      echo "$mac" >"$out/attacked/$name.mac"
    done
  done
  start_ts=$(first_packet "$capture")
  for a in "${attacks[@]}"; do
    kind=${a%%=*} file=${a#*=}
    for minutes in 1 10 30; do
      name=$device.$kind.after${minutes}min
      at=$(python3 -c "print($start_ts + 60 * $minutes)")
      "$metapu" datasets infect --benign "$capture" --device-mac "$mac" --attack "$file" --start-at "$at" \
        --out "$out/first-hour/$name.pcap" >/dev/null
      echo "$mac" >"$out/first-hour/$name.mac"
      # The same after production's onboarding (`metapu onboard --for 6h`): its first
      # hour starts 6 h after the first packet.
      at=$(python3 -c "print($start_ts + 6 * 3600 + 60 * $minutes)")
      "$metapu" datasets infect --benign "$capture" --device-mac "$mac" --attack "$file" --start-at "$at" \
        --out "$out/first-hour-6h/$name.pcap" >/dev/null
      echo "$mac" >"$out/first-hour-6h/$name.mac"
    done
  done
  read -r peer bytes < <(python3 scripts/usual-upload.py "$capture" "$mac")
  "$metapu" datasets attack --kind upload --to "$peer" --bytes "$bytes" --duration 600 --seed 1 \
    --out "$out/attacks/$device.upload-10x-usual.pcap" >/dev/null
  for a in "upload-stranger=$out/attacks/upload-stranger.pcap" "beacon-slow=$out/attacks/beacon-slow.pcap" \
    "upload-10x-usual=$out/attacks/$device.upload-10x-usual.pcap"; do
    kind=${a%%=*} file=${a#*=}
    name=$device.$kind.again3d
    "$metapu" datasets infect --benign "$capture" --device-mac "$mac" --attack "$file" --start 0.25 \
      --again-after 259200 --out "$out/never-learned/$name.pcap" >/dev/null
    echo "$mac" >"$out/never-learned/$name.mac"
  done
  for a in "${repeated[@]}"; do
    kind=${a%%=*} file=${a#*=}
    for waves in 0.25=259200=3d 0.5=3600=1h; do
      IFS== read -r start after apart <<<"$waves"
      name=$device.$kind.again$apart
      "$metapu" datasets infect --benign "$capture" --device-mac "$mac" --attack "$file" --start "$start" \
        --again-after "$after" --out "$out/repeated/$name.pcap" >/dev/null
      echo "$mac" >"$out/repeated/$name.mac"
    done
  done
done
# OUT/inside: the camera's week with the SYN scan and the SSH guesser merged while one of
# its incidents is open (on the shipped model, 10 records labeled: the false incident of
# its first evening, 20 s after its last upload packet, and two of its learned uploads,
# suppressed, 5 s in): an attack inside an open incident gets its own (issue #96).
mkdir -p "$out/inside"
camera=$pcap/week/blink-cam-01.pcap
if [[ -f $camera ]]; then
  mac=$(tr -d '[:space:]' <"$pcap/week/blink-cam-01.mac")
  for a in "syn-scan=$pcap/ndpi/synscan.pcap" "ssh.bruteforce=$out/attacks/ssh.bruteforce.pcap"; do
    kind=${a%%=*} file=${a#*=}
    for at in 1615227560 1615310660 1615663040; do
      name=blink-cam-01.$kind.at$at
      "$metapu" datasets infect --benign "$camera" --device-mac "$mac" --attack "$file" --start-at "$at" \
        --out "$out/inside/$name.pcap" >/dev/null
      echo "$mac" >"$out/inside/$name.mac"
    done
  done
fi
echo "week-data: $(ls "$out"/clean/*.pcap | wc -l) clean weeks, $(ls "$out"/attacked/*.pcap | wc -l) with an attack, $(ls "$out"/repeated/*.pcap | wc -l) with one repeated, $(ls "$out"/first-hour/*.pcap | wc -l) in the first hour, $(ls "$out"/never-learned/*.pcap | wc -l) never to be learned, $(ls "$out"/inside/*.pcap | wc -l) inside an open incident, in $out"
