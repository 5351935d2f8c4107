"""The real-traffic benchmark split into validation and target devices, so that a choice
(an estimator, a recipe, a seed, a threshold) is made on validation devices only and
reported on the others (issue #37). Validation, fixed before any variant was tried: every
third device of each network, from the first, in name order (5 of Kitsune's 13 hosts, 9
of IoT Sentinel's 25 devices); a device's streams (one per attack) go together.

    python3 scripts/real-validation.py RUN_DIR [RUN_DIR …]
    python3 scripts/real-validation.py --table runs/sweep/val-NAME-sSEED …
    python3 scripts/real-validation.py --halves runs/sweep/val-NAME-sSEED …
    python3 scripts/real-validation.py --compare BEFORE_RUN_DIR AFTER_RUN_DIR
    python3 scripts/real-validation.py --thresholds RUN_DIR
    python3 scripts/real-validation.py --unseen UNSEEN_DIR …


--table: one row per run of `scripts/recipe-sweep.sh` (validation devices, Danmini),
means per recipe, and the run the rule below chooses. --halves: each run's FPR on two
halves of the validation devices, and how alike the halves rank the runs (Spearman).
--compare: each device's FPR in two runs (two models on the same streams). --thresholds:
the streaming rates on the validation devices only, had the daemon alerted above other
anomaly scores than its 0.5 (the threshold changes no adaptation, so the run's scores
give them exactly). --unseen: per folder of `DEVICES=validation
scripts/real-unseen-kinds.sh UNSEEN_DIR`, the validation streams of its families
pooled, and each family's protocol, overall and per target prior π (with ours' mean
estimate π̂ there). RUN_DIR is a `metapu-lab
real-traffic --out` folder (stream.json, scores-ours.csv) of all
devices or of some (a captures folder holding only the validation devices' files runs
in a third of the time), optionally with `eval/results.json` (`metapu-lab eval --out
RUN_DIR/eval` on its real.csv) and `danmini/results.json` (the Danmini rows, as
`make iot-results`).
"""
import csv
import json
import os
import statistics
import sys


def device(stream):
    return stream.rsplit(".", 1)[0]


VALIDATION = {
    "kitsune-00166c7f8220", "kitsune-34ea34f10483", "kitsune-48022e018315", "kitsune-50c7bf1c9cc6",
    "kitsune-e0b94d087123", "sentinel-Aria", "sentinel-D-LinkDoorSensor", "sentinel-D-LinkSiren",
    "sentinel-EdimaxPlug1101W", "sentinel-EdnetCam2", "sentinel-HueBridge", "sentinel-TP-LinkPlugHS100",
    "sentinel-WeMoSwitch", "sentinel-iKettle2",
}


# The two parts of the benchmark, as (name, keep(device)).
PARTS = (("validation", lambda d: d in VALIDATION), ("target", lambda d: d not in VALIDATION))


def stream_rates(rows, keep):
    """FPR and TPR (%), streams alerting after attack record 10 or never, and streams kept."""
    rows = [r for r in rows if keep(device(r["device"]))]
    benign, false_alarms = sum(r["benign"] for r in rows), sum(r["benign_alerts"] for r in rows)
    attack, detected = sum(r["attack"] for r in rows), sum(r["attack_alerts"] for r in rows)
    late = sum(1 for r in rows if not r["attack_alerts"] or (r["first_alert"] or 0) > 10)
    return 100 * false_alarms / benign, 100 * detected / attack, late, len(rows)


def by_attack(rows, keep):
    """TPR and late streams per attack (the part after the stream name's last dot)."""
    attacks = sorted({r["device"].rsplit(".", 1)[1] for r in rows})
    parts = []
    for attack in attacks:
        _, tpr, late, streams = stream_rates([r for r in rows if r["device"].endswith("." + attack)], keep)
        parts.append(f"{attack} TPR {tpr:.1f} %, late {late} of {streams}")
    return "; ".join(parts)


def per_device_fpr(rows, keep):
    """FPR (%) of each device with benign records after the labeled ones."""
    per = {}
    for r in rows:
        d = device(r["device"])
        if keep(d) and r["benign"]:
            alerts, benign = per.get(d, (0, 0))
            per[d] = (alerts + r["benign_alerts"], benign + r["benign"])
    return {d: 100 * a / b for d, (a, b) in per.items()}


def device_fpr(rows, keep):
    """The mean of the devices' FPRs: each device weighs the same, however many benign
    records it sent (the record-weighted FPR turns on the largest)."""
    per = per_device_fpr(rows, keep)
    return sum(per.values()) / max(1, len(per))


def compare_devices(before_dir, after_dir):
    """Each device's FPR in two runs, and per part how many went down or up."""
    runs = [json.load(open(os.path.join(d, "stream.json")))["devices"] for d in (before_dir, after_dir)]
    for name, keep in PARTS:
        before, after = (per_device_fpr(rows, keep) for rows in runs)
        for d in sorted(before, key=lambda d: -after.get(d, 0)):
            print(f"  {name:10s} {d:32s} FPR {before[d]:5.1f} % → {after.get(d, float('nan')):5.1f} %")
        pairs = [(before[d], after[d]) for d in before if d in after]
        if not pairs:  # a run of one fold's devices (scripts/real-attacks.sh)
            continue
        print(f"{name}: {len(pairs)} devices, {sum(a < b for b, a in pairs)} lower, {sum(a > b for b, a in pairs)} "
              f"higher, {sum(a == b for b, a in pairs)} unchanged; median "
              f"{statistics.median(b for b, _ in pairs):.2f} % → {statistics.median(a for _, a in pairs):.2f} %")


def streaming(rows, keep):
    fpr, tpr, late, streams = stream_rates(rows, keep)
    return (f"FPR {fpr:5.2f} % (device mean {device_fpr(rows, keep):5.2f} %), TPR {tpr:5.2f} %, "
            f"first alert after record 10 or never: {late} of {streams} streams")


def kept_episodes(run, method, keep):
    """(accuracy, episode) of `method` on the episodes of the devices `keep` accepts."""
    return [(a, e) for a, e in zip(method["accuracies"], run["episodes"]) if keep(device(e["task"]))]


def by_prior(pairs):
    """{target prior π: [value, …]} of (value, episode) pairs, in order of π."""
    out = {}
    for value, e in sorted(pairs, key=lambda p: p[1]["prior"]):
        out.setdefault(e["prior"], []).append(value)
    return out


def protocol(run, keep):
    out = []
    for method in run["methods"]:
        pairs = kept_episodes(run, method, keep)
        if not pairs:
            continue
        mean = sum(a for a, _ in pairs) / len(pairs)
        high = by_prior(pairs)[0.8]
        out.append(f"{method['method']} {100 * mean:.2f} % (π = 0.8: {100 * sum(high) / len(high):.2f} %)")
    return "; ".join(out)


def scores_by_stream(path, keep=lambda d: True):
    """scores-ours.csv's records of the kept devices' streams, in stream order, as
    (attack, anomaly score) per stream (label 1 = attack; above 0.5 the daemon alerts)."""
    streams = {}
    for row in csv.DictReader(open(path)):
        if keep(device(row["device"])):
            streams.setdefault(row["device"], []).append((row["label"] == "1", float(row["score"])))
    return streams


def before_and_after_attack(path):
    """Benign FPR before a stream's first attack record and after it."""
    counts = {"before": [0, 0], "after": [0, 0]}
    for records in scores_by_stream(path).values():
        start = next((i for i, (attack, _) in enumerate(records) if attack), len(records))
        for i, (attack, score) in enumerate(records):
            alert = score > 0.5
            if not attack:
                part = counts["before" if i < start else "after"]
                part[0] += 1
                part[1] += alert
    return ", ".join(f"{k} the attack starts {100 * a / n:.1f} % of {n}" for k, (n, a) in counts.items())


# The choice among trained models, fixed before the sweep that first used it (docs/
# experiments/2026-11-26-onset-episodes.md): the streaming goals first — TPR ≥ 95 %
# and at most 4 of the 42 validation streams alerting late (after attack record 10) or
# never — then the lowest false-alarm rate.
MAX_LATE = 4


def sweep_row(run_dir):
    name, _, seed = os.path.basename(run_dir.rstrip("/")).removeprefix("val-").rpartition("-s")
    validation = PARTS[0][1]
    rows = json.load(open(os.path.join(run_dir, "stream.json")))["devices"]
    fpr, tpr, late, streams = stream_rates(rows, validation)
    per_device = device_fpr(rows, validation)
    run = json.load(open(os.path.join(run_dir, "eval", "results.json")))["runs"][0]
    pairs = kept_episodes(run, next(m for m in run["methods"] if m["method"] == "Ours"), validation)
    high = [a for a, e in pairs if e["prior"] == 0.8]
    danmini = json.load(open(os.path.join(run_dir, "danmini", "results.json")))["summary"]["methods"][0]
    return dict(recipe=name, seed=int(seed), fpr=fpr, per_device=per_device, tpr=tpr,
                late=late, streams=streams, protocol=100 * sum(a for a, _ in pairs) / len(pairs),
                high=100 * sum(high) / len(high), danmini=100 * danmini["mean_accuracy"])


def table(run_dirs):
    rows = sorted((sweep_row(d) for d in run_dirs), key=lambda r: (r["recipe"], r["seed"]))
    print("| recipe | seed | stream FPR | FPR, device mean | stream TPR | late or never | protocol | at π = 0.8 | Danmini |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['recipe']} | {r['seed']} | {r['fpr']:.2f} % | {r['per_device']:.2f} % | {r['tpr']:.2f} % | "
              f"{r['late']} of {r['streams']} | {r['protocol']:.2f} % | {r['high']:.2f} % | {r['danmini']:.2f} % |")
    print()
    print("| recipe | seeds | mean FPR | FPR, device mean | mean TPR | late or never, all seeds | protocol | at π = 0.8 "
          "| Danmini |")
    print("|---|---|---|---|---|---|---|---|---|")
    for recipe in sorted({r["recipe"] for r in rows}):
        rs = [r for r in rows if r["recipe"] == recipe]
        mean = lambda key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
        print(f"| {recipe} | {len(rs)} | {mean('fpr'):.2f} % | {mean('per_device'):.2f} % | {mean('tpr'):.2f} % | "
              f"{sum(r['late'] for r in rs)} of {sum(r['streams'] for r in rs)} | {mean('protocol'):.2f} % | "
              f"{mean('high'):.2f} % | {mean('danmini'):.2f} % |")
    eligible = [r for r in rows if r["tpr"] >= 95 and r["late"] <= MAX_LATE]
    if eligible:
        best = min(eligible, key=lambda r: r["fpr"])
        print(f"\nchosen: {best['recipe']} seed {best['seed']} (validation FPR {best['fpr']:.2f} %, "
              f"TPR {best['tpr']:.2f} %, {best['late']} late)")
    else:
        print("\nchosen: none meets TPR ≥ 95 % with at most 4 late streams")


def halves(run_dirs):
    """How well the validation FPR ranks models: the validation devices in two halves
    (alternately, in name order), each sweep run's FPR on both, and the rank correlation."""
    names = sorted(VALIDATION)
    first, second = set(names[0::2]), set(names[1::2])
    runs = []
    for run_dir in sorted(run_dirs):
        rows = json.load(open(os.path.join(run_dir, "stream.json")))["devices"]
        a, b = (stream_rates(rows, half.__contains__)[0] for half in (first, second))
        runs.append((os.path.basename(run_dir.rstrip("/")), a, b))
        print(f"{runs[-1][0]:28s} FPR first half {a:5.2f} %, second half {b:5.2f} %")

    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        return [order.index(i) for i in range(len(values))]

    ra, rb, n = ranks([r[1] for r in runs]), ranks([r[2] for r in runs]), len(runs)
    rho = 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))
    print(f"Spearman rank correlation between the halves over {n} runs: {rho:.2f}")


def thresholds(run_dir):
    """Validation FPR (records, device mean), TPR and late streams at other thresholds."""
    labeled = json.load(open(os.path.join(run_dir, "stream.json")))["labeled"]
    streams = scores_by_stream(os.path.join(run_dir, "scores-ours.csv"), PARTS[0][1])
    for tau in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
        rows = []
        for stream, records in streams.items():
            r = {"device": stream, "benign": 0, "benign_alerts": 0, "attack": 0, "attack_alerts": 0}
            known, first = 0, None
            for attack, score in records:
                alert = score > tau
                if attack:
                    r["attack"] += 1
                    r["attack_alerts"] += alert
                    if alert and first is None:
                        first = r["attack"]
                elif known < labeled:
                    known += 1  # labeled normal: not counted, as in the daemon's streaming
                else:
                    r["benign"] += 1
                    r["benign_alerts"] += alert
            rows.append(dict(r, first_alert=first))
        fpr, tpr, late, n = stream_rates(rows, PARTS[0][1])
        per_device = device_fpr(rows, PARTS[0][1])
        print(f"threshold {tau}: validation FPR {fpr:.2f} % (device mean {per_device:.2f} %), "
              f"TPR {tpr:.2f} %, {late} of {n} streams late")


def unseen_families(unseen_dir):
    """(family, folder) of each family that scripts/real-unseen-kinds.sh ran in UNSEEN_DIR."""
    return sorted(
        (f, os.path.join(unseen_dir, f))
        for f in os.listdir(unseen_dir)
        if os.path.exists(os.path.join(unseen_dir, f, "stream.json"))
    )


def unseen(unseen_dirs):
    """Simulated attack families left out of training, on the validation devices."""
    for unseen_dir in sorted(unseen_dirs):
        families = unseen_families(unseen_dir)
        rows = [r for _, d in families for r in json.load(open(os.path.join(d, "stream.json")))["devices"]]
        print(f"{os.path.basename(unseen_dir.rstrip('/'))}: validation streaming {streaming(rows, PARTS[0][1])}")
        for f, d in families:
            run = json.load(open(os.path.join(d, "eval", "results.json")))["runs"][0]
            print(f"  {f} protocol: {protocol(run, PARTS[0][1])}")
            print(f"    by π: {protocol_by_prior(run, PARTS[0][1])}")


def protocol_by_prior(run, keep):
    """Each method's mean accuracy at each target prior π, and the mean of its own
    estimate π̂ at each π where the run recorded one."""
    out = []
    for method in run["methods"]:
        pairs = kept_episodes(run, method, keep)
        if not pairs:
            continue
        text = f"{method['method']} " + ", ".join(
            f"{p}: {100 * statistics.mean(at):.1f} %" for p, at in by_prior(pairs).items()
        )
        estimates = method.get("estimated_priors") or []
        if estimates and method["method"] == "Ours":
            kept = [(est, e) for est, e in zip(estimates, run["episodes"]) if keep(device(e["task"]))]
            text += " (mean π̂ " + ", ".join(f"{statistics.mean(v):.2f}" for v in by_prior(kept).values()) + ")"
        out.append(text)
    return "; ".join(out)


def main():
    if sys.argv[1:2] == ["--unseen"]:
        unseen(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--thresholds"]:
        thresholds(sys.argv[2])
        return
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--halves"]:
        halves(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--compare"]:
        compare_devices(*sys.argv[2:4])
        return
    for run_dir in sys.argv[1:]:
        rows = json.load(open(os.path.join(run_dir, "stream.json")))["devices"]
        print(run_dir)
        scores = os.path.join(run_dir, "scores-ours.csv")
        if os.path.exists(scores):
            print(f"  all streams: benign FPR {before_and_after_attack(scores)}")
        results = os.path.join(run_dir, "eval", "results.json")
        run = json.load(open(results))["runs"][0] if os.path.exists(results) else None
        for name, keep in PARTS:
            if not any(keep(device(r["device"])) for r in rows):
                continue
            print(f"  {name:10s} streaming: {streaming(rows, keep)}")
            print(f"  {name:10s} by attack: {by_attack(rows, keep)}")
            if run:
                print(f"  {name:10s} protocol:  {protocol(run, keep)}")
        danmini = os.path.join(run_dir, "danmini", "results.json")
        if os.path.exists(danmini):
            methods = json.load(open(danmini))["summary"]["methods"]
            print("  Danmini:   " + "; ".join(f"{m['method']} {100 * m['mean_accuracy']:.2f} %" for m in methods))


if __name__ == "__main__":
    main()
