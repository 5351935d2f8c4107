#!/usr/bin/env bash
# The real-traffic benchmark's real attacks (make real-results), leaving devices out in
# two folds (scripts/folds.py): the target devices are streamed and scored in the
# paper's protocol by MODEL (make iot-model's, which never saw them); the validation
# devices, where choices are made, are streamed by the same recipe trained on the target
# devices instead (FOLD=validation scripts/iot-model.sh).
#
#   scripts/real-attacks.sh OUT MODEL   (METAPU and LAB may point elsewhere)
#
# Writes OUT/captures-FOLD/ (scripts/real-data.sh), OUT/FOLD/ (what `metapu-lab
# real-traffic` writes) for FOLD target and validation, OUT/target/eval (`metapu-lab
# eval`) and OUT/validation-model.safetensors.
set -euo pipefail
out=${1:?usage: scripts/real-attacks.sh OUT MODEL} model=${2:?}
lab=${LAB:-target/release/metapu-lab}
rm -rf "$out" && mkdir -p "$out"
FOLD=validation bash scripts/iot-model.sh "$out/validation-model" "$out/validation-model.safetensors" | tail -3
rm -rf "$out/validation-model"
for fold in target validation; do
  ONLY=$(python3 scripts/folds.py scored "$fold") bash scripts/real-data.sh "$out/captures-$fold"
done
"$lab" real-traffic --captures "$out/captures-target" --model "$model" --out "$out/target"
"$lab" real-traffic --captures "$out/captures-validation" --model "$out/validation-model.safetensors" \
  --out "$out/validation"
"$lab" eval --data "$out/target/real.csv" --split "$out/target/real.split.json" --model "$model" \
  --methods ours,ours-no-prior,ours-true-prior,nnpu --target-repeats 3 --out "$out/target/eval"
