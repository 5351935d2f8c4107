"""Ours (a `metapu train` model with its defaults) against nnPU given the true prior,
per Synthetic draw and training seed, from `metapu-lab eval`'s results.json files
(scripts/synthetic-defaults.sh). Each file is one draw's 240 target episodes; the
paired difference is taken over the same episodes.

    python3 scripts/synthetic-defaults.py OUT/eval-*/results.json
"""

import json
import math
import re
import sys

PAPER = 82.37


def method(run, name):
    for m in run["methods"]:
        if m["method"] == name:
            return m["accuracies"]
    raise SystemExit(f"no {name} in the run")


def mean(v):
    return sum(v) / len(v)


def sd(v):
    m = mean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")


rows = []
for path in sys.argv[1:]:
    found = re.search(r"eval-(\d+)-(\d+)", path)
    draw, seed = found.groups() if found else (path, "?")
    run = json.load(open(path))["runs"][0]
    ours, true_prior, nnpu = method(run, "Ours"), method(run, "OursTruePrior"), method(run, "NnPu")
    diff = [a - b for a, b in zip(ours, nnpu)]
    t = mean(diff) / (sd(diff) / math.sqrt(len(diff)))
    rows.append((draw, seed, 100 * mean(ours), 100 * mean(true_prior), 100 * mean(nnpu), 100 * mean(diff), t, len(ours)))

print("| draw (datasets synthetic --seed) | metapu train --seed | episodes | ours | ours w/ true π † | nnPU † | ours − nnPU (paired t) |")
print("|---|---|---|---|---|---|---|")
for draw, seed, o, tp, n, d, t, e in rows:
    print(f"| {draw} | {seed} | {e} | {o:.2f} | {tp:.2f} | {n:.2f} | {d:+.2f} (t = {t:.1f}) |")
seed0 = [r for r in rows if r[1] == "0"]
if seed0:
    o = [r[2] for r in seed0]
    n = [r[4] for r in seed0]
    print(
        f"| **mean of the {len(seed0)} draws, seed 0** | | | **{mean(o):.2f}** (sd {sd(o):.2f}) | "
        f"{mean([r[3] for r in seed0]):.2f} | {mean(n):.2f} (sd {sd(n):.2f}) | {mean(o) - mean(n):+.2f} |"
    )
    print(f"\nThe paper's figure: {PAPER}; the mean is {mean(o) - PAPER:+.2f} from it.")
