#!/usr/bin/env bash
# make week-results' inputs: the week-long captures of ../shared/data/pcap/week (three
# real devices, a week of their own traffic each), as they are (OUT/clean) and with an
# attack merged in at a quarter, half and three quarters of the week (OUT/attacked):
# the three real attack captures and two simulated floods (`metapu datasets attack`,
# 1 s each). OUT/repeated: each of those and two simulated attacks written as the wire
# has them (an ARP sweep of the LAN, an SSH password guesser: issue #75) merged twice,
# at a quarter and again 3 days later, and at half and again 1 hour later: what the
# daemon learned of an unanswered first wave may not hide the second. Writes NAME.pcap,
# NAME.mac (and NAME.labels.csv for the attacked ones).
# Usage: scripts/week-data.sh OUT   (METAPU and PCAP may point elsewhere)
set -euo pipefail
out=${1:?usage: scripts/week-data.sh OUT}
metapu=${METAPU:-target/release/metapu}
pcap=${PCAP:-../shared/data/pcap}
mkdir -p "$out/clean" "$out/attacked" "$out/repeated" "$out/attacks"

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
echo "week-data: $(ls "$out"/clean/*.pcap | wc -l) clean weeks, $(ls "$out"/attacked/*.pcap | wc -l) with an attack, $(ls "$out"/repeated/*.pcap | wc -l) with one repeated, in $out"
