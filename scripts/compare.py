#!/usr/bin/env python3
"""Paired comparison of one method between two `metapu-lab eval` runs.

    python3 scripts/compare.py METHOD A/results.json B/results.json

METHOD is the name as results.json spells it (Ours, OursNoPrior, OursTruePrior, Np, ...).
Both files must hold the same splits and the same target episodes (that is what makes
the comparison paired; `metapu-lab eval --merge` checks the same). Prints the mean accuracy
of each, the mean difference per episode with its t statistic and two-sided p-value
(normal approximation: there are 1,200 episodes in a five-split run), each run's mean
validation accuracy and the iterations its models were kept at.
"""

import json
import statistics
import sys


def load(path, method):
    with open(path) as f:
        runs = sorted(json.load(f)["runs"], key=lambda r: r["split"])
    found = [m for r in runs for m in r["methods"] if m["method"] == method]
    if len(found) != len(runs):
        sys.exit(f"{path}: {method} is missing from {len(runs) - len(found)} of {len(runs)} splits")
    return {
        "episodes": [r["episodes"] for r in runs],
        "accuracies": [a for m in found for a in m["accuracies"]],
        "validation": [m["validation_accuracy"] for m in found],
        "iterations": [m.get("best_iteration") for m in found],
    }


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    method, path_a, path_b = argv[1:]
    a, b = load(path_a, method), load(path_b, method)
    if a["episodes"] != b["episodes"]:
        sys.exit("the two runs did not draw the same target episodes: no paired comparison")
    diff = [x - y for x, y in zip(a["accuracies"], b["accuracies"])]
    spread = statistics.stdev(diff)
    t = statistics.mean(diff) / (spread / len(diff) ** 0.5) if spread > 0 else 0.0
    p = 2 * (1 - statistics.NormalDist().cdf(abs(t)))
    print(
        f"{method}: {100 * statistics.mean(a['accuracies']):.2f} vs "
        f"{100 * statistics.mean(b['accuracies']):.2f}, difference "
        f"{100 * statistics.mean(diff):.2f} points, t = {t:.2f}, p = {p:.3f}; validation "
        f"{100 * statistics.mean(a['validation']):.2f} vs {100 * statistics.mean(b['validation']):.2f}; "
        f"kept iterations {a['iterations']} vs {b['iterations']}"
    )


if __name__ == "__main__":
    main(sys.argv)
