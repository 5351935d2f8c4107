#!/usr/bin/env bash
# make iot-model's recipe, in one place: meta-train on simulated doorbells, thermostats
# and cameras (baby monitors and webcams held out), on four real consumer-IoT hosts and
# on the real-traffic benchmark's validation devices of IoT Sentinel, all made infected
# with simulated attacks (scripts/source-data.sh). The benchmark's target devices stay
# out (scripts/folds.py).
#
#   scripts/iot-model.sh WORK MODEL   (METAPU and LAB may point elsewhere)
#
# KINDS=a,b,… trains on those attack kinds only, in the simulated devices and the real
# sources alike (scripts/real-unseen-kinds.sh's leave-kinds-out models). Without it,
# every kind: MODEL is then the shipped model, byte for byte. SEED (3) seeds training.
# FOLD=validation trains on the target devices instead, for a model that scores the
# validation devices (make real-results; experiments that choose on them).
set -euo pipefail
work=${1:?usage: scripts/iot-model.sh WORK MODEL} model=${2:?}
metapu=${METAPU:-target/release/metapu}
# The recipe's onset episodes and prior estimate are the lab's training knobs.
lab=${LAB:-target/release/metapu-lab}
mkdir -p "$work"
"$metapu" simulate --devices 250 --duration 10m --seed 1 --attacked 1 --max-rows-per-class 500 \
  ${KINDS:+--attacks "$KINDS"} --out "$work/iot-train.csv" --split-out "$work/iot-train.split.json" \
  --holdout-types baby_monitor,webcam
SOURCE_DEVICES=$(python3 scripts/folds.py sources "${FOLD:-target}") \
  bash scripts/source-data.sh "$work/iot-train.csv" "$work/iot-train.split.json" "$work/iot-train-real"
# The IoT recipe predates `metapu train`'s Synthetic defaults (a cosine rate over 60k
# iterations, the weight average, protocol-prior episodes) and was chosen on the
# real-traffic validation devices with these settings, which it names in full.
"$lab" train --data "$work/iot-train-real.csv" --split "$work/iot-train-real.split.json" \
  --out "$model" --iterations 3000 --eval-every 250 --patience 10 --meta-batch 8 \
  --preprocess log-standard --lr-schedule constant --weight-average 0 --init-scale 1 --episode-priors own \
  --prior-estimate known-normal-median --onset-share 0.25 --seed "${SEED:-3}"
"$metapu" info "$model"
