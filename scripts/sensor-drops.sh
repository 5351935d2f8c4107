#!/usr/bin/env bash
# Kernel drops against the offered packet rate (docs/operations.md, "Sensor"), as root:
# the release `metapu sense` on one end of a veth pair (no broker: records queue), on the
# other, in a network namespace of its own, two Python AF_PACKET senders unpaced, each
# sending Kitsune's 2,000 frames 50 times. Prints the rate offered and the sensor's counts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ns=mpu-drops; a=mpd-a; b=mpd-b
ip netns add $ns; ip link add $a type veth peer name $b; ip link set $b netns $ns
sysctl -qw net.ipv6.conf.$a.disable_ipv6=1; ip netns exec $ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1
ip link set $a up; ip netns exec $ns ip link set $b up
work=$(mktemp -d)
trap 'ip link del $a 2>/dev/null; ip netns del $ns 2>/dev/null; kill $sense 2>/dev/null; rm -rf "$work"' EXIT
printf 'camera,5c:cf:7f:05:f2:c6\nhub,4c:09:d4:c6:12:7b\n' >"$work/devices.csv"
python3 -c "import sys; d=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(d[:24]+d[24:]*50)" \
  data/pcap/kitsune/mirai2000.pcap "$work/x50.pcap"
METAPU__KAFKA__BROKERS=127.0.0.1:1 METAPU__SENSOR__LISTEN=127.0.0.1:19899 METAPU__SENSOR__MAX_QUEUED_RECORDS=10000000 \
  target/release/metapu sense --interface $a --devices "$work/devices.csv" >"$work/sense.log" 2>&1 &
sense=$!
sleep 2
send() { ip netns exec $ns python3 tests/sensor/send_frames.py $b "$work/x50.pcap" >"$work/sent.$1"; }
start=$(date +%s.%N)
send 1 & first=$!
send 2
wait $first
end=$(date +%s.%N)
n=$(( $(cat "$work/sent.1") + $(cat "$work/sent.2") ))
sleep 3
m=$(curl -s 127.0.0.1:19899/metrics)
echo "sent $n frames in $(echo "$end - $start" | bc) s: $(echo "$n / ($end - $start)" | bc) frames/s"
grep -E '^metapu_sensor_(packets_total|kernel_drops_total)' <<<"$m"
