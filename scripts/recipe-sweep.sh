#!/usr/bin/env bash
# A meta-training recipe over seeds, judged on the real-traffic validation devices only
# (scripts/real-validation.py's split) and reported on the Danmini rows (issue #37):
#
#   bash scripts/recipe-sweep.sh NAME "SEEDS" [metapu-lab train options…]
#   python3 scripts/real-validation.py --table runs/sweep/val-*
#
# Needs make iot-model's data (runs/iot-train.csv, the simulated sources; DATA and SPLIT
# name other training data, such as runs/iot-train-real.csv and .split.json, which add
# the real ones) and make real-results' captures (runs/real/captures). Writes
# runs/sweep/NAME-sSEED.safetensors and runs/sweep/val-NAME-sSEED/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
name=$1 seeds=$2
shift 2
lab=target/release/metapu-lab runs=runs sweep=runs/sweep
data=${DATA:-$runs/iot-train.csv} split=${SPLIT:-$runs/iot-train.split.json}
mkdir -p "$sweep/captures-val"
# The validation devices' captures (a third of the streams: a third of the time).
python3 - "$runs/real/captures" "$sweep/captures-val" <<'PY'
import os, sys
sys.path.insert(0, "scripts")
from importlib import import_module
validation = import_module("real-validation").VALIDATION
src, dst = sys.argv[1:]
for f in os.listdir(src):
    if f.split(".", 1)[0] in validation and not os.path.exists(os.path.join(dst, f)):
        os.link(os.path.join(src, f), os.path.join(dst, f))
PY
echo '{"source": [], "validation": [], "target": ["danmini_doorbell"]}' > "$sweep/danmini.split.json"
for seed in $seeds; do
  model=$sweep/$name-s$seed.safetensors out=$sweep/val-$name-s$seed
  [[ -f $model ]] || $lab train --data "$data" --split "$split" --out "$model" \
    --iterations 3000 --eval-every 250 --patience 10 --meta-batch 8 --preprocess log-standard \
    --lr-schedule constant --weight-average 0 --init-scale 1 --episode-priors own --seed "$seed" "$@" 2>&1 | tail -1
  $lab real-traffic --captures "$sweep/captures-val" --model "$model" --out "$out" 2>&1 | tail -1
  $lab eval --data "$out/real.csv" --split "$out/real.split.json" --model "$model" --methods ours \
    --target-repeats 3 --out "$out/eval" >/dev/null
  $lab eval --data ../shared/data/nbaiot/raw --split "$sweep/danmini.split.json" --model "$model" \
    --methods ours --target-repeats 20 --out "$out/danmini" >/dev/null
  python3 scripts/real-validation.py "$out" | grep -E "validation|Danmini"
done
