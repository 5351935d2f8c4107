#!/usr/bin/env bash
# Reruns docs/results.md's chosen figures for ours and NP on the paper's Synthetic tasks
# (`make results-synthetic`): per split, ours' ensemble of eight meta-trained models and
# NP's ensemble of two, scored on the same 1,200 target episodes and merged into one
# table with the paired t-tests. Resumable: a model or result already written is kept.
#
#   scripts/synthetic-ensemble.sh [OUT]          OUT defaults to runs/synthetic-ensemble
#
# Environment:
#   JOBS        trainings run at once (one thread each; default: the number of cores)
#   SPLITS      which splits (default "0 1 2 3 4"; split S's data is `datasets synthetic --seed S`)
#   ITERATIONS  the long budget (default 120000); the short one is half of it. Lower it
#               for a quick check of the pipeline: the figures are then not the doc's.
#   METAPU      the binary (default target/release/metapu)
#
# Ours' members, per split S (training seed 1000·S + m, as `eval --members` numbers them):
#   long-m0, long-m1, long-m2   ITERATIONS, cosine rate, seeds + 0, + 1, + 2
#   short-m0, short-m1          ITERATIONS/2, seeds + 0, + 1
#   short-beta03                ITERATIONS/2, seed + 0, prior term weight β = 0.3
#   short-k64                   ITERATIONS/2, seed + 0, task-vector size K = 64
#   short-lr2e3                 ITERATIONS/2, seed + 0, learning rate 2e-3 (the others' 1e-3)
# One split takes about an hour with JOBS=2 on a 2-core AMD EPYC VM with nothing else
# running (120k members 20 min each, NP's pair 12–13, 60k members 10; 89 min while
# builds shared the cores): five take hours.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

out=${1:-runs/synthetic-ensemble}
metapu=${METAPU:-target/release/metapu}
jobs=${JOBS:-$(nproc)}
splits=${SPLITS:-"0 1 2 3 4"}
long=${ITERATIONS:-120000}
short=$((long / 2))
eval_every=$((short < 500 ? short : 500))

[[ -x "$metapu" ]] || { echo "no $metapu: run \`make build\` first" >&2; exit 1; }
[[ "$long" =~ ^[0-9]+$ && "$long" -ge 2 ]] || { echo "ITERATIONS must be a whole number ≥ 2" >&2; exit 1; }
# The job list is split on spaces.
[[ "$out$metapu" != *[[:space:]]* ]] || { echo "OUT and METAPU must not contain spaces" >&2; exit 1; }
mkdir -p "$out"/{data,models,logs}

common="--meta-batch 8 --k 32 --preprocess none --episode-priors 0.2,0.4,0.6,0.8 --init-scale 0.408"
common+=" --threads 1 --eval-every $eval_every --weight-average 0.999 --lr-schedule cosine"
# Patience as long as the budget: the cosine rate is run to its end, the best
# validation checkpoint kept.
flags_long="$common --iterations $long --patience $((long / eval_every))"
flags_short="$common --iterations $short --patience $((short / eval_every))"
ours="--methods ours,ours-no-prior,ours-true-prior"

for s in $splits; do
  [[ -f "$out/data/syn-$s.split.json" ]] ||
    "$metapu" datasets synthetic --seed "$s" --out "$out/data/syn-$s.csv" >/dev/null
done

# One line per job: its name, the file it writes, the command. Longest first.
joblist="$out/logs/jobs.txt"
: >"$joblist"
add_train() { # member seed-offset split flags...
  local member=$1 offset=$2 s=$3
  shift 3
  local model="$out/models/$member/split-$s.safetensors"
  mkdir -p "$out/models/$member"
  echo "$member-s$s|$model|$metapu train --data $out/data/syn-$s.csv --split $out/data/syn-$s.split.json $* --seed $((1000 * s + offset)) --out $model" >>"$joblist"
}
for s in $splits; do
  for m in 0 1 2; do add_train "long-m$m" "$m" "$s" $flags_long; done
  echo "np-s$s|$out/np-s$s/results.json|$metapu eval $flags_short --splits 1 --first-split $s --methods np --members 2 --out $out/np-s$s" >>"$joblist"
done
for s in $splits; do
  for m in 0 1; do add_train "short-m$m" "$m" "$s" $flags_short; done
  add_train short-beta03 0 "$s" $flags_short --prior-loss-weight 0.3
  add_train short-k64 0 "$s" ${flags_short/--k 32/--k 64}
  add_train short-lr2e3 0 "$s" $flags_short --learning-rate 0.002
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

# Scoring: each member adapts to the same supports; ~1 s a split.
members=(long-m0 long-m1 long-m2 short-m0 short-m1 short-beta03 short-k64 short-lr2e3)
for s in $splits; do
  "$metapu" eval $flags_short $ours --splits 1 --first-split "$s" \
    --members-from "${members[@]/#/$out/models/}" --out "$out/ours-s$s" >"$out/logs/ours-s$s.log" 2>&1
  "$metapu" eval $flags_short $ours --splits 1 --first-split "$s" \
    --members-from "$out/models/long-m0" --out "$out/ours-single-s$s" >"$out/logs/ours-single-s$s.log" 2>&1
done

results() { for s in $splits; do echo "$out/$1-s$s/results.json"; done; }
"$metapu" eval --merge $(results ours) --out "$out/ours" >/dev/null
"$metapu" eval --merge $(results ours-single) --out "$out/ours-single" >/dev/null
"$metapu" eval --merge $(results np) --out "$out/np" >/dev/null
"$metapu" eval --merge "$out/np/results.json" "$out/ours/results.json" --out "$out/table" >/dev/null

echo
echo "ours' ensemble against its first long member alone, paired over the same episodes:"
python3 scripts/compare.py Ours "$out/ours/results.json" "$out/ours-single/results.json"
echo
echo "the table (ours' ensemble beside NP's): $out/table/results.md"
# The first table of results.md: from its heading to the first blank line after its rows.
awk '/mean test accuracy/ { on = 1 } on && /^\|/ { rows = 1 } on && rows && /^$/ { exit } on' "$out/table/results.md"
