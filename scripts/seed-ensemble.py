#!/usr/bin/env python3
"""Would an ensemble of seeds cut false alarms on real traffic? (issue #37)

    python3 scripts/seed-ensemble.py runs/sweep/val-RECIPE-s0 runs/sweep/val-RECIPE-s1 ...

Reads each run's per-record scores (scores-ours.csv of `metapu-lab real-traffic`, written
by scripts/recipe-sweep.sh for the validation devices) and prints, per run and for the
mean of the runs' posteriors (each member adapted on its own, as model/ensemble.rs
averages them), the streaming FPR, TPR and streams alerting after attack record 10 or
never, counted as scripts/real-validation.py counts them: a record alerts when its
anomaly score exceeds 0.5; each device's first 10 benign records are its labeled ones.
"""
import csv
import os
import sys
from collections import defaultdict
from importlib import import_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
stream_rates = import_module("real-validation").stream_rates

LABELED = 10


def rates(devices, attack, scores):
    """Per stream, the counts `metapu-lab real-traffic` writes to stream.json, then the
    rates real-validation.py reports from them."""
    streams = defaultdict(lambda: {"benign": 0, "benign_alerts": 0, "attack": 0, "attack_alerts": 0,
                                   "first_alert": None, "labeled": 0})
    for d, is_attack, score in zip(devices, attack, scores):
        s, alert = streams[d], score > 0.5
        if is_attack:
            s["attack"] += 1
            s["attack_alerts"] += alert
            if alert and s["first_alert"] is None:
                s["first_alert"] = s["attack"]
        elif s["labeled"] < LABELED:
            s["labeled"] += 1
        else:
            s["benign"] += 1
            s["benign_alerts"] += alert
    rows = [dict(s, device=d) for d, s in streams.items()]
    return stream_rates(rows, lambda _: True)


def main(runs):
    members = []
    for run in runs:
        with open(f"{run}/scores-ours.csv") as f:
            rows = list(csv.DictReader(f))
        members.append(rows)
    devices = [r["device"] for r in members[0]]
    attack = [r["label"] == "1" for r in members[0]]
    for run, rows in zip(runs, members):
        if [r["device"] for r in rows] != devices:
            sys.exit(f"{run}: other streams than {runs[0]}")
        scores = [float(r["score"]) for r in rows]
        print("%-40s FPR %5.2f %%, TPR %5.2f %%, late or never %d of %d" % (run, *rates(devices, attack, scores)))
    mean = [sum(float(m[i]["score"]) for m in members) / len(members) for i in range(len(devices))]
    print("%-40s FPR %5.2f %%, TPR %5.2f %%, late or never %d of %d" % (f"mean of {len(runs)}", *rates(devices, attack, mean)))


if __name__ == "__main__":
    main(sys.argv[1:])
