#!/usr/bin/env bash
# The real-traffic benchmark's simulated attack kinds (issue #37; make real-results):
# the simulator's floods, which no real attack capture covers, each injected into every
# target device of scripts/real-data.sh (not the validation devices of
# scripts/real-validation.py: nothing is chosen on these streams), and scored by a model
# that never saw its family, nor the devices it scores.
# Leave kinds out: for each family below, scripts/iot-model.sh trains make iot-model's
# recipe on every other kind (the scans stay: the real scans are held out from all models
# anyway), and only that model scores the family's streams.
#
#   scripts/real-unseen-kinds.sh OUT   (METAPU and LAB may point elsewhere)
#
# The paper's protocol runs on one stream per device and family (its kind taken in turn
# over the devices: nnPU's training is most of the time), streaming on all.
#
# For experiments (docs/experiments/): DEVICES=validation injects into the validation
# devices instead (choices are made there); EXTRA_KINDS=a,b,… adds attack kinds to every
# family's training (such as the simulator's kinds beyond N-BaIoT's); SEED (3) and
# METHODS (ours,ours-no-prior,ours-true-prior,nnpu) go to training and to the protocol.
#
# Writes per family OUT/FAMILY/: model.safetensors (kept between runs unless the metapu
# binary or the recipe's scripts are newer: one OUT per SEED and EXTRA_KINDS),
# captures/, and what `metapu-lab real-traffic` and `metapu-lab eval` write.
set -euo pipefail
out=${1:?usage: scripts/real-unseen-kinds.sh OUT}
metapu=${METAPU:-target/release/metapu}
lab=${LAB:-target/release/metapu-lab}
all=(mirai.scan mirai.syn mirai.ack mirai.udp mirai.udpplain gafgyt.scan gafgyt.junk gafgyt.tcp gafgyt.udp gafgyt.combo)
# family=kinds held out together: a model that saw mirai.syn would have seen gafgyt.tcp's
# packets in all but name. gafgyt.combo alternates telnet scanning with junk floods.
families=(
  "tcp-floods=mirai.syn,mirai.ack,gafgyt.tcp,gafgyt.junk,gafgyt.combo"
  "udp-floods=mirai.udp,mirai.udpplain,gafgyt.udp"
)
# Seconds of each attack injected: 300 to 750 packets at the simulator's rates, the
# attack records of a stream about as many as a small device's benign ones.
seconds=1
# Validation devices (of scripts/real-validation.py): left out, or with
# DEVICES=validation the only ones.
validation=$(python3 -c 'import sys; sys.path.insert(0, "scripts"); print(" ".join(sorted(__import__("real-validation").VALIDATION)))')
case ${DEVICES:-target} in
  target) which=(SKIP="$validation") ;;
  validation) which=(ONLY="$validation") ;;
  *) echo "DEVICES: target or validation" >&2 && exit 2 ;;
esac

for f in "${families[@]}"; do
  family=${f%%=*} held=${f#*=}
  dir=$out/$family
  kept=()
  for k in "${all[@]}"; do [[ ,$held, == *",$k,"* ]] || kept+=("$k"); done
  mkdir -p "$dir/attacks"
  model=$dir/model.safetensors
  stale=no
  for input in "$metapu" "$lab" scripts/iot-model.sh scripts/source-data.sh scripts/folds.py scripts/benchmark-devices.sh \
    scripts/real-validation.py; do
    [[ $input -nt $model ]] && stale=yes
  done
  if [[ ! -f $model || $stale == yes ]]; then
    # The model never saw the devices it scores either (scripts/folds.py).
    KINDS=$(IFS=,; echo "${kept[*]}")${EXTRA_KINDS:+,$EXTRA_KINDS} FOLD=${DEVICES:-target} METAPU=$metapu LAB=$lab \
      bash scripts/iot-model.sh "$dir/train" "$model" | tail -3
    rm -rf "$dir/train"
  fi
  attacks=()
  for k in ${held//,/ }; do
    for i in "${!all[@]}"; do [[ ${all[$i]} == "$k" ]] && seed=$i; done
    "$metapu" datasets attack --kind "$k" --duration "$seconds" --seed "$seed" --out "$dir/attacks/$k.pcap" >/dev/null
    attacks+=("${k/./-}=$dir/attacks/$k.pcap")
  done
  rm -rf "$dir/captures"
  env "${which[@]}" METAPU="$metapu" bash scripts/real-data.sh "$dir/captures" "${attacks[@]}"
  "$lab" real-traffic --captures "$dir/captures" --model "$model" --out "$dir"
  python3 - "$dir/real.split.json" "$dir/protocol.split.json" <<'PY'
import json, sys
split = json.load(open(sys.argv[1]))
by_device = {}
for stream in sorted(split["target"]):
    by_device.setdefault(stream.split(".", 1)[0], []).append(stream)
split["target"] = [streams[i % len(streams)] for i, streams in enumerate(by_device[d] for d in sorted(by_device))]
json.dump(split, open(sys.argv[2], "w"))
PY
  "$lab" eval --data "$dir/real.csv" --split "$dir/protocol.split.json" --model "$model" \
    --methods "${METHODS:-ours,ours-no-prior,ours-true-prior,nnpu}" --out "$dir/eval"
done
