#!/usr/bin/env bash
# Reruns docs/results.md's chosen figures for ours and NP on the paper's Synthetic tasks
# (`make results-synthetic`): per split, ours' ensemble of five meta-trained models and
# NP's ensemble of two, scored on the same 1,200 target episodes and merged into one
# table with the paired t-tests. Ours is validated on fresh episodes
# (`eval --fresh-validation 5`, docs/results.md "Validation on fresh episodes").
# Resumable: a model or result already written is kept (a score is redone when one of
# its models or the lab binary is newer).
#
#   scripts/synthetic-ensemble.sh [OUT]          OUT defaults to runs/synthetic-ensemble
#
# Environment:
#   JOBS        trainings run at once (one thread each; default: the number of cores)
#   SPLITS      which splits (default "0 1 2 3 4"; split S's data is `datasets synthetic --seed S`)
#   ITERATIONS  every member's budget (default 60000). Lower it for a quick check of the
#               pipeline: the figures are then not the doc's.
#   METAPU, LAB the binaries (default target/release/metapu and target/release/metapu-lab)
#
# Ours' members, per split S (training seed 1000·S + m, as `eval --members` numbers them),
# each ITERATIONS with the cosine rate and the true-prior risk of weight α
# (`--true-prior-risk-weight`):
#   a1-m0, a1-m1     α = 1, seeds + 0, + 1
#   a3-m0, a3-m1     α = 3, seeds + 0, + 1
#   a10-m0           α = 10, seed + 0
# One split takes about 25 min with JOBS=2 on a 2-core AMD EPYC VM with nothing else
# running (each member 6–7 min, NP's pair 12–13): five take about two hours.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

out=${1:-runs/synthetic-ensemble}
metapu=${METAPU:-target/release/metapu}
lab=${LAB:-target/release/metapu-lab}
jobs=${JOBS:-$(nproc)}
splits=${SPLITS:-"0 1 2 3 4"}
iterations=${ITERATIONS:-60000}
eval_every=$((iterations < 500 ? iterations : 500))

for bin in "$metapu" "$lab"; do
  [[ -x "$bin" ]] || { echo "no $bin: run \`make build\` first" >&2; exit 1; }
done
[[ "$iterations" =~ ^[0-9]+$ && "$iterations" -ge 1 ]] || { echo "ITERATIONS must be a whole number ≥ 1" >&2; exit 1; }
# The job list is split on spaces.
[[ "$out$metapu$lab" != *[[:space:]]* ]] || { echo "OUT, METAPU and LAB must not contain spaces" >&2; exit 1; }
mkdir -p "$out"/{data,models,logs}

common="--meta-batch 8 --k 32 --preprocess none --episode-priors 0.2,0.4,0.6,0.8 --init-scale 0.408"
common+=" --threads 1 --eval-every $eval_every --weight-average 0.999 --lr-schedule cosine"
# Patience as long as the budget: the cosine rate is run to its end, the best
# validation checkpoint kept.
flags="$common --iterations $iterations --patience $((iterations / eval_every))"
ours="--methods ours,ours-no-prior,ours-true-prior --fresh-validation 5"

for s in $splits; do
  [[ -f "$out/data/syn-$s.split.json" ]] ||
    "$metapu" datasets synthetic --seed "$s" --out "$out/data/syn-$s.csv" >/dev/null
done

# One line per job: its name, the file it writes, the command. Longest (NP's pair) first.
joblist="$out/logs/jobs.txt"
: >"$joblist"
add_train() { # member seed-offset split flags...
  local member=$1 offset=$2 s=$3
  shift 3
  local model="$out/models/$member/split-$s.safetensors"
  mkdir -p "$out/models/$member"
  echo "$member-s$s|$model|$lab train --data $out/data/syn-$s.csv --split $out/data/syn-$s.split.json $* --seed $((1000 * s + offset)) --out $model" >>"$joblist"
}
for s in $splits; do
  echo "np-s$s|$out/np-s$s/results.json|$lab eval $flags --splits 1 --first-split $s --methods np --members 2 --out $out/np-s$s" >>"$joblist"
done
for s in $splits; do
  for a in 1 3; do
    for m in 0 1; do add_train "a$a-m$m" "$m" "$s" $flags --true-prior-risk-weight "$a"; done
  done
  add_train a10-m0 0 "$s" $flags --true-prior-risk-weight 10
done

run_job() { # name|output|command
  local name=${1%%|*} rest=${1#*|}
  local output=${rest%%|*} command=${rest#*|}
  if [[ -s "$output" ]]; then echo "$name: kept $output"; return 0; fi
  local start=$SECONDS
  if $command >"$out/logs/$name.log" 2>&1; then
    echo "$name: $((SECONDS - start)) s"
  else
    echo "$name: failed, see $out/logs/$name.log" >&2
    return 1
  fi
}
export -f run_job
export out
echo "$(wc -l <"$joblist") jobs, $jobs at a time; logs in $out/logs"
tr '\n' '\0' <"$joblist" | xargs -0 -P "$jobs" -I{} bash -c 'run_job "$1"' _ {}

# Scoring: each member adapts to the same supports; ~1 s a split. Kept, like the
# models, unless a member's model or the lab binary is newer than the result.
score() { # name split member-dir...
  local name=$1 s=$2 member
  shift 2
  local result="$out/$name/results.json"
  if [[ -s "$result" ]]; then
    local stale=
    [[ "$lab" -nt "$result" ]] && stale=1
    for member in "$@"; do [[ "$member/split-$s.safetensors" -nt "$result" ]] && stale=1; done
    if [[ -z "$stale" ]]; then echo "$name: kept $result"; return 0; fi
  fi
  "$lab" eval $flags $ours --splits 1 --first-split "$s" --members-from "$@" \
    --out "$out/$name" >"$out/logs/$name.log" 2>&1
}
members=(a1-m0 a1-m1 a3-m0 a3-m1 a10-m0)
for s in $splits; do
  score "ours-s$s" "$s" "${members[@]/#/$out/models/}"
  score "ours-single-s$s" "$s" "$out/models/a1-m0"
done

results() { for s in $splits; do echo "$out/$1-s$s/results.json"; done; }
"$lab" eval --merge $(results ours) --out "$out/ours" >/dev/null
"$lab" eval --merge $(results ours-single) --out "$out/ours-single" >/dev/null
"$lab" eval --merge $(results np) --out "$out/np" >/dev/null
"$lab" eval --merge "$out/np/results.json" "$out/ours/results.json" --out "$out/table" >/dev/null

echo
echo "ours' ensemble against its first member alone, paired over the same episodes:"
python3 scripts/compare.py Ours "$out/ours/results.json" "$out/ours-single/results.json"
echo
echo "the table (ours' ensemble beside NP's): $out/table/results.md"
# The first table of results.md: from its heading to the first blank line after its rows.
awk '/mean test accuracy/ { on = 1 } on && /^\|/ { rows = 1 } on && rows && /^$/ { exit } on' "$out/table/results.md"
