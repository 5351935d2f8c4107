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

while read -r -u 3 name mac how files; do
  [[ $how == - ]] && how=
  # shellcheck disable=SC2086 # the capture paths hold no spaces
  infect "$name" "$mac" "$how" $files
done 3< <(PCAP=$pcap bash "$(dirname "$0")/benchmark-devices.sh")
echo "real-data: $(ls "$out"/*.pcap | wc -l) infected captures in $out"
