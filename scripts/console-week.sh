#!/usr/bin/env bash
# docs/analysts.md's console pictures: the shared week's three real devices replayed
# through the daemon's pipeline (`metapu-lab week`, onboarded by their first 10 records,
# as make week-results does), what it would have published kept
# (`--published`), served read-only by the console's own pages (`metapu-lab console`)
# and photographed in headless Chromium: the incidents, the camera's device page (alerts
# by day, the prior, incidents marked) and its first incident.
# Usage: scripts/console-week.sh OUT [IMAGES]   (IMAGES: where the PNGs go; default OUT)
set -euo pipefail
out=${1:?usage: scripts/console-week.sh OUT [IMAGES]}
images=${2:-$out}
lab=${LAB:-target/release/metapu-lab}
week=${WEEK_CAPTURES:-../shared/data/pcap/week}
port=${PORT:-9896}
mkdir -p "$out" "$images"

OMP_NUM_THREADS=1 "$lab" week --captures "$week" --model models/iot-default.safetensors --out "$out" \
  --published "$out/published.jsonl"
"$lab" console --published "$out/published.jsonl" --listen "127.0.0.1:$port" &
console=$!
trap 'kill $console 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done

camera=blink-cam-01
first=$(curl -sf "http://127.0.0.1:$port/api/devices/$camera" | python3 -c 'import json,sys; print(json.load(sys.stdin)["incidents"][0])')
shoot() {
  # As root, without a GPU, and without reaching for Google's hosts on a closed network.
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$out/chromium" --hide-scrollbars \
    --window-size="1280,$3" --screenshot="$images/$1" "http://127.0.0.1:$port$2" 2>/dev/null
  echo "console-week: $images/$1 <- $2"
}
shoot console-incidents.png "/" 1000
shoot console-device.png "/devices/$camera" 1150
shoot console-incident.png "/incidents/$first" 1100
