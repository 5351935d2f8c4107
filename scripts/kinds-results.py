#!/usr/bin/env python3
"""The tables of docs/results.md "Device kinds" from scripts/kinds-results.sh's runs:
false incidents reaching the analyst (a fleet incident's joined members are not), and
the attacks, without and with the kind.
Usage: kinds-results.py OUT"""

import json
import sys
from pathlib import Path


def load(path):
    return json.loads(Path(path, "week.json").read_text())


def own(w):
    return bool(w["first_incident"]) and not w["open_at_attack"] and not w.get("attack_reopened")


def fpr(ws):
    alerts = sum(d[0] for w in ws for d in w["benign_by_day"])
    benign = sum(d[1] for w in ws for d in w["benign_by_day"])
    return 100.0 * alerts / max(benign, 1)


def row(name, ws):
    first, rest = ws[0], ws[1:]
    hours = sum(w["benign_hours"] for w in ws)
    false = sum(len(w["false_incidents"]) for w in ws)
    attacked = [w for w in ws if w["attack"]]
    return (
        f"| {name} | {len(first['false_incidents'])} | {sum(len(w['false_incidents']) for w in rest)} "
        f"| {sum(len(w.get('joined', [])) for w in ws)} "
        f"| {sum(len(w['suppressed']) for w in ws)} | {100.0 * false / max(hours, 1e-9):.2f} "
        f"| {fpr(ws):.2f} % | {sum(own(w) for w in attacked)} of {len(attacked)} |"
    )


def main(out):
    out = Path(out)
    print("Camera fleet (the shared camera, then its week with each of 15 attacks merged in; 16 cameras):\n")
    print("| kind | false incidents, first camera | false incidents, the other 15 | joined a fleet incident | suppressed | per 100 device-hours | benign FPR | attacks with an incident of their own |")
    print("|---|---|---|---|---|---|---|---|")
    print(row("none", load(out / "fleet-analyst")))
    print(row("blink-cam", load(out / "fleet-analyst-kind")))
    print("\nIoT Sentinel pairs of one model, both infected with the same attack (8 devices, 4 kinds):\n")
    print("| attack | kind | false incidents | suppressed | benign FPR | attacks with an incident of their own | attack records to it (each device) |")
    print("|---|---|---|---|---|---|---|")
    for attack in ["syn-scan", "icmp-sweep", "tcp-scan"]:
        for name, suffix in [("none", ""), ("by model", "-kind")]:
            ws = load(out / f"siblings-{attack}-analyst{suffix}")
            firsts = " ".join(str(w["first_incident"]) for w in ws)
            print(
                f"| {attack} | {name} | {sum(len(w['false_incidents']) for w in ws)} "
                f"| {sum(len(w['suppressed']) for w in ws)} | {fpr(ws):.2f} % "
                f"| {sum(own(w) for w in ws)} of {len(ws)} | {firsts} |"
            )


if __name__ == "__main__":
    main(*sys.argv[1:])
