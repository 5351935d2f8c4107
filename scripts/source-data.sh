#!/usr/bin/env bash
# Real benign traffic for meta-training (issue #37; make iot-model): the consumer-IoT
# hosts of nDPI's captures in ../shared/data/pcap/ndpi, none of them a device of the
# real-traffic benchmark, each made infected with every simulated attack kind
# (`metapu datasets attack`: 5 s of each, and 0.25 s of the scans and two floods, a few
# dozen packets like the short real scans; merged halfway by `metapu datasets infect`),
# features from `metapu extract`. No real attack capture is used: the benchmark's attacks
# stay held out. At most 500 rows per class and task, evenly spaced in time, as
# `metapu simulate --max-rows-per-class 500` keeps them.
#
#   scripts/source-data.sh SIM.csv SIM.split.json OUT   (METAPU and PCAP may point elsewhere)
#
# SOURCE_DEVICES="NAME …" adds those devices of the real-traffic benchmark
# (scripts/benchmark-devices.sh), infected in the same way: the benchmark then scores
# them with another model (make real-results: leave devices out, in two folds).
#
# KINDS=a,b,… keeps only those attack kinds (models that must not see the others:
# scripts/real-unseen-kinds.sh), and may name the simulator's kinds beyond N-BaIoT's;
# each kept kind's seed stays what it is without KINDS.
#
# writes OUT.csv (SIM.csv's tasks, then the real ones) and OUT.split.json (SIM's split
# with the real tasks added to the sources).
set -euo pipefail
sim=${1:?usage: scripts/source-data.sh SIM.csv SIM.split.json OUT} sim_split=${2:?} out=${3:?}
metapu=${METAPU:-target/release/metapu}
pcap=${PCAP:-../shared/data/pcap}
work=$(mktemp -d)
mkdir "$work/rows"
trap 'rm -rf "$work"' EXIT

# NAME MAC HOW CAPTURE…, as scripts/benchmark-devices.sh writes them: the two hosts that
# send most in each of two nDPI captures (the Alexa app's traffic and a Google Nest; the
# README of ../shared/data/pcap), and the benchmark's devices that SOURCE_DEVICES names.
hosts=(
  "alexa 78:f8:82:d3:fb:c2 - $pcap/ndpi/alexa-app.pcapng"
  "alexaap 00:c0:ca:91:5a:01 - $pcap/ndpi/alexa-app.pcapng"
  "nest 18:b4:30:26:34:40 - $pcap/ndpi/nest_log_sink.pcap"
  "nestgw 00:90:fb:26:27:6b - $pcap/ndpi/nest_log_sink.pcap"
)
if [[ -n ${SOURCE_DEVICES:-} ]]; then
  wanted=(${SOURCE_DEVICES})
  while read -r line; do
    [[ " $SOURCE_DEVICES " == *" ${line%% *} "* ]] && hosts+=("$line")
  done < <(PCAP=$pcap bash "$(dirname "$0")/benchmark-devices.sh")
  if ((${#hosts[@]} != 4 + ${#wanted[@]})); then
    echo "source-data: SOURCE_DEVICES names a device the benchmark does not have (scripts/benchmark-devices.sh): $SOURCE_DEVICES" >&2
    exit 2
  fi
fi
# name=kind=seconds=seed
attacks=()
kinds=(mirai.scan mirai.syn mirai.ack mirai.udp mirai.udpplain gafgyt.scan gafgyt.junk gafgyt.tcp gafgyt.udp gafgyt.combo)
kept() { [[ -z ${KINDS:-} || ,$KINDS, == *",$1,"* ]]; }
for i in "${!kinds[@]}"; do kept "${kinds[$i]}" && attacks+=("${kinds[$i]}=${kinds[$i]}=5=$i"); done
# The simulator's kinds beyond N-BaIoT's, 30 s each (a beacon sends every few seconds),
# only when KINDS names them.
extra=(telnet.bruteforce cnc.beacon dns.amplification exfiltration.burst)
for i in "${!extra[@]}"; do
  [[ -n ${KINDS:-} ]] && kept "${extra[$i]}" && attacks+=("${extra[$i]}=${extra[$i]}=30=$((10 + i))")
done
short=(mirai.scan gafgyt.scan mirai.syn mirai.ack)
if [[ ${SHORT:-yes} == yes ]]; then # SHORT=no: without them (docs/experiments/2026-11-26-real-sources.md)
  for i in "${!short[@]}"; do
    kept "${short[$i]}" && attacks+=("short-${short[$i]}=${short[$i]}=0.25=$((20 + i))")
  done
fi

for a in "${attacks[@]}"; do
  IFS== read -r name kind seconds seed <<<"$a"
  "$metapu" datasets attack --kind "$kind" --duration "$seconds" --seed "$seed" --out "$work/$name.pcap" >/dev/null
done
for h in "${hosts[@]}"; do
  read -r host mac how files <<<"$h"
  [[ $how == - ]] && how=
  for a in "${attacks[@]}"; do
    name=${a%%=*} task=src-$host.${a%%=*}
    # shellcheck disable=SC2086 # the capture paths hold no spaces
    "$metapu" datasets infect $how --benign $files --device-mac "$mac" --attack "$work/$name.pcap" --start 0.5 \
      --out "$work/$task.pcap" >/dev/null
    echo "$task,$mac" >"$work/$task.device"
    "$metapu" extract --pcap "$work/$task.pcap" --devices "$work/$task.device" \
      --labels "$work/$task.labels.csv" --out "$work/rows/$task.csv" >/dev/null
  done
done

python3 - "$sim" "$sim_split" "$out" "$work" <<'PY'
import csv, json, os, shutil, sys
sim, sim_split, out, work = sys.argv[1:]
tasks = sorted(f[: -len(".csv")] for f in os.listdir(os.path.join(work, "rows")))
shutil.copyfile(sim, out + ".csv")
rows = 0
with open(out + ".csv", "a", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    for task in tasks:
        read = list(csv.reader(open(os.path.join(work, "rows", task + ".csv"))))[1:]
        for label in ("1", "0"):  # benign first: every stream starts benign
            kept = [r for r in read if r[1] == label]
            n, k = len(kept), min(500, len(kept))
            w.writerows(kept[j * n // k] for j in range(k))
            rows += k
split = json.load(open(sim_split))
split["source"] += tasks
json.dump(split, open(out + ".split.json", "w"))
print(f"source-data: {len(tasks)} real source tasks, {rows} rows, added to {sim} → {out}.csv, {out}.split.json")
PY
