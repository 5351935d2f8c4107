#!/usr/bin/env python3
"""make week-results' tables from `metapu-lab week`'s week.json files: false incidents
per device-day on the clean weeks (when they open: hour of day, day since onboarding),
the alert rate per day since onboarding, and for every attack merged in whether it got
an incident of its own.

    scripts/week-results.py CLEAN/week.json ATTACKED/week.json
"""
import json
import sys
from collections import defaultdict


def main(clean_path, attacked_path):
    clean = json.load(open(clean_path))
    attacked = json.load(open(attacked_path))

    print("### False incidents on the clean weeks\n")
    print("| device | benign device-days | false incidents | per device-day | per 100 device-hours | opened at (UTC hour, day since onboarding) | reopened (closed quietly < reopen_s before) | in the first hour after onboarding |")
    print("|---|---|---|---|---|---|---|---|")
    hours = incidents = reopened = first_hour = 0
    for w in clean:
        n, h = len(w["false_incidents"]), w["benign_hours"]
        r = len(w.get("false_reopened", []))
        f = sum(x < 1.0 for x in w.get("false_incident_hours", []))
        hours, incidents, reopened, first_hour = hours + h, incidents + n, reopened + r, first_hour + f
        when = ", ".join(f"{hr:.0f} h d{d}" for hr, d in w["false_incidents"]) or "–"
        print(f"| {w['capture']} | {h / 24:.1f} | {n} | {n / (h / 24):.2f} | {100 * n / h:.1f} | {when} | {r} | {f} |")
    print(f"| **all** | {hours / 24:.1f} | {incidents} | {incidents / (hours / 24):.2f} | {100 * incidents / hours:.1f} | | {reopened} | {first_hour} |")

    print("\n### Benign alert rate per day since onboarding (clean weeks)\n")
    days = max(len(w["benign_by_day"]) for w in clean)
    print("| device | " + " | ".join(f"day {d}" for d in range(days)) + " |")
    print("|---|" + "---|" * days)
    for w in clean:
        cells = [f"{100 * a / b:.1f} %" if b else "–" for a, b in w["benign_by_day"]]
        print(f"| {w['capture']} | " + " | ".join(cells + ["–"] * (days - len(cells))) + " |")

    print("\n### Attacks merged into the weeks (at ¼, ½ and ¾ of each)\n")
    print("| attack | records | own incident | inside a false incident already open | reopened a false incident | none | attack records to its incident (median) |")
    print("|---|---|---|---|---|---|---|")
    by_attack = defaultdict(list)
    for w in attacked:
        by_attack[w["capture"].split(".", 1)[1].rsplit(".at", 1)[0]].append(w)
    total = defaultdict(int)
    for attack, ws in sorted(by_attack.items()):
        own = [w for w in ws if w["first_incident"] and not w["open_at_attack"] and not w.get("attack_reopened")]
        inside = sum(w["open_at_attack"] for w in ws)
        back = sum(bool(w.get("attack_reopened")) for w in ws)
        none = sum(w["first_incident"] is None for w in ws)
        firsts = sorted(w["first_incident"] for w in own)
        median = firsts[len(firsts) // 2] if firsts else "–"
        print(f"| {attack} | {ws[0]['attack']} | {len(own)} of {len(ws)} | {inside} | {back} | {none} | {median} |")
        total["own"] += len(own)
        total["inside"] += inside
        total["back"] += back
        total["none"] += none
        total["all"] += len(ws)
    print(f"| **all** | | {total['own']} of {total['all']} | {total['inside']} | {total['back']} | {total['none']} | |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
