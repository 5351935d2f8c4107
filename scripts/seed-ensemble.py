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
import sys
from collections import defaultdict

LABELED = 10


def rates(devices, attack, scores):
    benign = false_alarms = attacks = detected = late = 0
    streams = defaultdict(list)
    for d, a, s in zip(devices, attack, scores):
        streams[d].append((a, s > 0.5))
    for rows in streams.values():
        labeled, seen, first = 0, 0, None
        for is_attack, alert in rows:
            if not is_attack:
                if labeled < LABELED:
                    labeled += 1
                    continue
                benign += 1
                false_alarms += alert
            else:
                attacks += 1
                detected += alert
                seen += 1
                if alert and first is None:
                    first = seen
        late += first is None or first > 10
    return 100 * false_alarms / benign, 100 * detected / attacks, late, len(streams)


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
