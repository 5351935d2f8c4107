"""make bench, the peer comparison: River's HalfSpaceTrees (with MinMaxScaler) and
PySAD's LODA and xStream, one model per device, on the same labeled stream as ours
(runs/bench/stream.csv), prequentially: score each record, then learn from it.
Metrics for every method (ours from runs/bench/scores-ours.csv) are computed here by
the same code: ROC AUC and TPR at 1 % FPR, overall (records pooled) and per device
(mean over devices that have both classes). Prints a Markdown table."""

import csv
import json
import warnings
import sys
import time
from collections import defaultdict

import numpy as np
from pysad.models import LODA, xStream
from river import anomaly, compose, preprocessing

SEED = 0


def load_stream(path):
    devices = defaultdict(lambda: ([], []))
    with open(path) as f:
        r = csv.reader(f)
        header = next(r)
        t, l = header.index("task"), header.index("label")
        feats = [i for i in range(len(header)) if i not in (t, l)]
        for row in r:
            x, y = devices[row[t]]
            x.append([float(row[i]) for i in feats])
            y.append(1 if row[l] == "0" else 0)  # 1 = attack
    return {d: (np.asarray(x), np.asarray(y)) for d, (x, y) in devices.items()}


def roc_auc(y, s):
    y, s = np.asarray(y), np.asarray(s, dtype=float)
    pos, neg = y.sum(), len(y) - y.sum()
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    # Average ranks for ties.
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def tpr_at_fpr(y, s, fpr=0.01):
    y, s = np.asarray(y), np.asarray(s, dtype=float)
    if y.sum() == 0 or y.sum() == len(y):
        return float("nan")
    threshold = np.quantile(s[y == 0], 1 - fpr, method="higher")
    return float((s[y == 1] > threshold).mean())


def run_river(x, _y):
    model = compose.Pipeline(preprocessing.MinMaxScaler(), anomaly.HalfSpaceTrees(seed=SEED))
    names = [f"f{i}" for i in range(x.shape[1])]
    scores = []
    for row in x:
        d = dict(zip(names, row.tolist()))
        scores.append(model.score_one(d))
        model.learn_one(d)
    return scores


def run_pysad(make, log):
    def run(x, _y):
        model = make()
        # Signed log: raw N-BaIoT values span 0 to ~1e17 (epoch timestamps, their
        # variances), which breaks xStream's binning; ours applies the same transform.
        if log:
            x = np.sign(x) * np.log1p(np.abs(x))
        scores = []
        for row in x:
            scores.append(float(model.fit_score_partial(row)))
        return scores

    return run


def main():
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # xStream on raw values
    stream, ours_scores, ours_json = sys.argv[1], sys.argv[2], sys.argv[3]
    data = load_stream(stream)
    n = sum(len(y) for _, y in data.values())
    results = {}
    peers = {
        "River HalfSpaceTrees + MinMaxScaler": run_river,
        "PySAD LODA (raw features)": run_pysad(lambda: LODA(random_state=SEED), False),
        "PySAD LODA (signed-log features)": run_pysad(lambda: LODA(random_state=SEED), True),
        "PySAD xStream (raw features)": run_pysad(lambda: xStream(random_state=SEED), False),
        "PySAD xStream (signed-log features)": run_pysad(lambda: xStream(random_state=SEED), True),
    }
    for name, run in peers.items():
        start = time.perf_counter()
        per = {d: run(x, y) for d, (x, y) in data.items()}
        seconds = time.perf_counter() - start
        results[name] = (per, n / seconds)
    ours = defaultdict(list)
    with open(ours_scores) as f:
        for row in csv.DictReader(f):
            ours[row["device"]].append(float(row["score"]))
    rates = json.load(open(ours_json))
    results["metapu (ours), JSON records"] = (dict(ours), rates["json_records_per_s"])
    results["metapu (ours), binary records"] = (dict(ours), rates["binary_records_per_s"])

    fastest_peer = max(v[1] for k, v in results.items() if not k.startswith("metapu"))
    print(f"Peer comparison: {len(data)} simulated devices, {n} records ({sum(int(y.sum()) for _, y in data.values())} attack), one model per device, prequential.")
    print()
    print("| method | records/s | vs fastest peer | ROC AUC (all) | ROC AUC (per device, mean) | TPR at 1 % FPR (all) | TPR at 1 % FPR (per device, mean) |")
    print("|---|---|---|---|---|---|---|")
    for name, (per, rate) in results.items():
        ys = np.concatenate([data[d][1] for d in data])
        ss = np.concatenate([np.asarray(per[d]) for d in data])
        dev_auc = np.nanmean([roc_auc(data[d][1], per[d]) for d in data])
        dev_tpr = np.nanmean([tpr_at_fpr(data[d][1], per[d]) for d in data])
        print(f"| {name} | {rate:,.0f} | {rate / fastest_peer:.1f}× | {roc_auc(ys, ss):.3f} | {dev_auc:.3f} | {tpr_at_fpr(ys, ss):.3f} | {dev_tpr:.3f} |")


if __name__ == "__main__":
    main()
