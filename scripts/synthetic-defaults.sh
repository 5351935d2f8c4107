#!/usr/bin/env bash
# `metapu train` with its defaults on fresh draws of the paper's Synthetic tasks, scored
# in the paper's protocol beside nnPU given the true prior (docs/results.md, "The
# paper's Synthetic benchmark"; issue #67). The draws' seeds were never used to choose
# anything: the recipe was chosen on draws 0–4 (scripts/synthetic-ensemble.sh).
#
#   scripts/synthetic-defaults.sh [OUT]     OUT defaults to runs/synthetic-defaults
#
# Environment: DRAWS (default "4242 5151 6262"), SEEDS (training seeds, default "0"),
# METAPU, LAB. A model or result already written is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-runs/synthetic-defaults}
metapu=${METAPU:-target/release/metapu} lab=${LAB:-target/release/metapu-lab}
draws=${DRAWS:-"4242 5151 6262"} seeds=${SEEDS:-0}
mkdir -p "$out"
for d in $draws; do
  [[ -f $out/syn-$d.split.json ]] || "$metapu" datasets synthetic --seed "$d" --out "$out/syn-$d.csv" >/dev/null
  for s in $seeds; do
    model=$out/syn-$d-seed-$s.safetensors
    if [[ ! -f $model ]]; then
      start=$SECONDS
      "$metapu" train --data "$out/syn-$d.csv" --split "$out/syn-$d.split.json" --seed "$s" --out "$model" \
        2>"$out/train-$d-$s.log" | tail -1
      echo "draw $d seed $s: trained in $((SECONDS - start)) s"
    fi
    [[ -s $out/eval-$d-$s/results.json ]] ||
      "$lab" eval --data "$out/syn-$d.csv" --split "$out/syn-$d.split.json" --model "$model" \
        --methods ours,ours-true-prior,nnpu --out "$out/eval-$d-$s" >"$out/eval-$d-$s.log" 2>&1
  done
done
python3 scripts/synthetic-defaults.py "$out"/eval-*/results.json
