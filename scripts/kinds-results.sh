#!/usr/bin/env bash
# make kinds-results: device kinds (`metapu onboard --kind`) measured through the
# daemon's pipeline (`metapu-lab week`, each device onboarded with its first 10 benign
# records labeled normal), with and without the kind, docs/results.md "Device kinds".
#  - A camera fleet: the shared week's camera, then the same camera's week with each of
#    the 15 attacks merged in, as 16 cameras of one kind (one physical device replayed:
#    its siblings share its peers exactly, the most a kind can share), with the analyst.
#  - IoT Sentinel's pairs of one model (EdimaxCam1/2, EdnetCam1/2, WeMoSwitch/2, the
#    TP-Link plugs), every device infected with the same attack (a worm across the kind).
# Usage: scripts/kinds-results.sh WEEK OUT   (WEEK from scripts/week-data.sh)
set -euo pipefail
week=${1:?usage: scripts/kinds-results.sh WEEK OUT}
out=${2:?usage: scripts/kinds-results.sh WEEK OUT}
lab=${METAPU_LAB:-target/release/metapu-lab}
model=${MODEL:-models/iot-default.safetensors}
mkdir -p "$out/fleet"
for f in "$week"/clean/blink-cam-01.* "$week"/attacked/blink-cam-01.*; do
  ln -sf "$(realpath "$f")" "$out/fleet/"
done
ONLY="sentinel-EdimaxCam1 sentinel-EdimaxCam2 sentinel-EdnetCam1 sentinel-EdnetCam2 sentinel-WeMoSwitch \
sentinel-WeMoSwitch2 sentinel-TP-LinkPlugHS100 sentinel-TP-LinkPlugHS110" \
  bash "$(dirname "$0")/real-data.sh" "$out/siblings-all" >/dev/null
for a in syn-scan icmp-sweep tcp-scan; do
  mkdir -p "$out/siblings-$a"
  for f in "$out"/siblings-all/*."$a".*; do
    b=$(basename "$f")
    ln -sf "$(realpath "$f")" "$out/siblings-$a/${b/.$a/}"
  done
done

run() { # captures out [flags…]
  local captures=$1 dir=$2
  shift 2
  "$lab" week --captures "$captures" --model "$model" --out "$dir" "$@" >"$dir.log"
}
run "$out/fleet" "$out/fleet-analyst" --analyst
run "$out/fleet" "$out/fleet-analyst-kind" --analyst --kind blink-cam-01=blink-cam
kinds=(--kind sentinel-EdimaxCam=edimax-cam --kind sentinel-EdnetCam=ednet-cam
  --kind sentinel-WeMoSwitch=wemo-switch --kind sentinel-TP-LinkPlug=tplink-plug)
for a in syn-scan icmp-sweep tcp-scan; do
  run "$out/siblings-$a" "$out/siblings-$a-analyst" --analyst
  run "$out/siblings-$a" "$out/siblings-$a-analyst-kind" --analyst "${kinds[@]}"
done
python3 "$(dirname "$0")/kinds-results.py" "$out"
