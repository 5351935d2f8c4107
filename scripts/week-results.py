#!/usr/bin/env python3
"""make week-results' tables from `metapu-lab week`'s week.json files: false incidents
per device-day on the clean weeks (when they open: hour of day, day since onboarding),
the alert rate per day since onboarding, and for every attack merged in whether it got
an incident of its own.

    scripts/week-results.py CLEAN/week.json ATTACKED/week.json [CLEAN_ANALYST/week.json ATTACKED_ANALYST/week.json
                            [REPEATED/week.json REPEATED_CONFIRMED/week.json [FIRST_HOUR/week.json
                            [NEVER_LEARNED/week.json [INSIDE/week.json]]]]]

With the analyst's runs (`metapu-lab week --analyst`: every false incident dismissed as
it closes), their tables follow under "With an analyst"; with the repeated attacks' runs
(scripts/week-data.sh's OUT/repeated: nobody answering, and every attack incident
answered `confirmed` as it closes), what each wave got; with the first hour's
(OUT/first-hour: each attack 1, 10 and 30 min after onboarding), what each got; with
what learning must never take (OUT/never-learned: merged twice, nobody answering), what
each wave got and whether any of it was learned; with the camera's week with an attack
merged while one of its incidents is open (OUT/inside), whether each got its own.
"""
import json
import sys
from collections import defaultdict


def main(clean_path, attacked_path, clean_analyst=None, attacked_analyst=None, repeated=None, confirmed=None,
         first_hour=None, never_learned=None, inside=None):
    tables(json.load(open(clean_path)), json.load(open(attacked_path)), "")
    if clean_analyst and attacked_analyst:
        print("\n## With an analyst\n")
        tables(json.load(open(clean_analyst)), json.load(open(attacked_analyst)), " (with an analyst)")
    if repeated:
        print("\n## Attacks repeated\n")
        waves(json.load(open(repeated)), "nobody answering")
        if confirmed:
            print()
            waves(json.load(open(confirmed)), "the first wave's incidents answered `confirmed` as they close")
    if first_hour:
        print("\n## Attacks in a device's first hour\n")
        early(json.load(open(first_hour)))
    if never_learned:
        print("\n## What learning must never take\n")
        waves(json.load(open(never_learned)), "nobody answering")
    if inside:
        print("\n## An attack inside an open incident\n")
        attack_table(json.load(open(inside)))


OUTCOMES = ["own", "look", "news", "reopened", "inside", "suppressed", "none"]


def waves(weeks, who):
    """Per attack and spacing, what the analyst got of each wave on the three devices."""
    print(f"### Each attack merged twice, {who}\n")
    print("| attack | apart | devices | first wave | second wave | second wave raised (own, look, news or reopened) | records the model alerted, first wave / second (per device) | wave's records to its raise, first / second (per device) | incidents learned in a wave |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups = defaultdict(list)
    for w in weeks:
        attack, apart = w["capture"].split(".", 1)[1].rsplit(".again", 1)
        groups[(attack, apart)].append(w)
    raised_all = total = learned_all = 0
    for (attack, apart), ws in sorted(groups.items()):
        cell = lambda k: ", ".join(f"{o} {n}" for o in OUTCOMES if (n := sum(len(w["waves"]) > k and w["waves"][k]["raised"] == o for w in ws)))
        raised = sum(len(w["waves"]) > 1 and w["waves"][1]["raised"] in ("own", "look", "news", "reopened") for w in ws)
        raised_all, total = raised_all + raised, total + len(ws)
        alerted = "; ".join(" / ".join(f"{v['alerted']}" for v in w["waves"]) + f" of {w['waves'][0]['records']}" for w in ws)
        at = "; ".join(" / ".join(str(v["at"]) if v.get("at") else "–" for v in w["waves"]) for w in ws)
        learned = sum(v.get("learned", 0) for w in ws for v in w["waves"])
        learned_all += learned
        print(f"| {attack} | {apart} | {len(ws)} | {cell(0)} | {cell(1)} | {raised} of {len(ws)} | {alerted} | {at} | {learned} |")
    print(f"| **all** | | {total} | | | {raised_all} of {total} | | | {learned_all} |")


def early(weeks):
    """Per attack, what each got when merged 1, 10 and 30 min after onboarding."""
    def outcome(w):
        if w.get("attack_reopened"):
            return "reopened"
        if w["open_at_attack"]:
            return "news" if w.get("attack_news") is not None else "inside"
        if w["first_incident"] is None:
            return "none"
        return "look" if w.get("looks_after") else "own"
    print("| attack | after onboarding | devices | raised as (own, look, news, reopened, inside, none) | attack records to its incident (per device) |")
    print("|---|---|---|---|---|")
    groups = defaultdict(list)
    for w in weeks:
        attack, after = w["capture"].split(".", 1)[1].rsplit(".after", 1)
        groups[(attack, int(after.removesuffix("min")))].append(w)
    raised = total = 0
    for (attack, after), ws in sorted(groups.items()):
        got = [outcome(w) for w in ws]
        cell = ", ".join(f"{o} {got.count(o)}" for o in ["own", "look", "news", "reopened", "inside", "none"] if o in got)
        raised += sum(o in ("own", "look", "news", "reopened") for o in got)
        total += len(ws)
        firsts = " ".join(str(w["first_incident"]) if w["first_incident"] is not None else "–" for w in ws)
        print(f"| {attack} | {after} min | {len(ws)} | {cell} | {firsts} |")
    print(f"| **all** | | {total} | {raised} of {total} raised | |")


def tables(clean, attacked, suffix):
    print(f"### False incidents on the clean weeks{suffix}\n")
    print("| device | benign device-days | false incidents | per device-day | per 100 device-hours | opened at (UTC hour, day since onboarding) | reopened (closed quietly < reopen_s before) | in the first hour after onboarding | suppressed (a dismissed behaviour: recorded, not raised) |")
    print("|---|---|---|---|---|---|---|---|---|")
    hours = incidents = reopened = first_hour = suppressed = 0
    for w in clean:
        n, h = len(w["false_incidents"]), w["benign_hours"]
        r = len(w.get("false_reopened", []))
        f = sum(x < 1.0 for x in w.get("false_incident_hours", []))
        s = len(w.get("suppressed", []))
        hours, incidents, reopened, first_hour = hours + h, incidents + n, reopened + r, first_hour + f
        suppressed += s
        when = ", ".join(f"{hr:.0f} h d{d}" for hr, d in w["false_incidents"]) or "–"
        print(f"| {w['capture']} | {h / 24:.1f} | {n} | {n / (h / 24):.2f} | {100 * n / h:.1f} | {when} | {r} | {f} | {s} |")
    print(f"| **all** | {hours / 24:.1f} | {incidents} | {incidents / (hours / 24):.2f} | {100 * incidents / hours:.1f} | | {reopened} | {first_hour} | {suppressed} |")

    print(f"\n### Benign alert rate per day since onboarding (clean weeks){suffix}\n")
    days = max(len(w["benign_by_day"]) for w in clean)
    print("| device | " + " | ".join(f"day {d}" for d in range(days)) + " |")
    print("|---|" + "---|" * days)
    for w in clean:
        cells = [f"{100 * a / b:.1f} %" if b else "–" for a, b in w["benign_by_day"]]
        print(f"| {w['capture']} | " + " | ".join(cells + ["–"] * (days - len(cells))) + " |")

    print(f"\n### Estimated normal share (prior) per day since onboarding, mean of the day's adaptations (clean weeks){suffix}\n")
    print("| device | " + " | ".join(f"day {d}" for d in range(days)) + " |")
    print("|---|" + "---|" * days)
    for w in clean:
        cells = [f"{p:.2f}" if p is not None else "–" for p, _ in w.get("prior_by_day", [])]
        print(f"| {w['capture']} | " + " | ".join(cells + ["–"] * (days - len(cells))) + " |")

    print(f"\n### Attacks merged into the weeks (at ¼, ½ and ¾ of each){suffix}\n")
    attack_table(attacked)


def attack_table(attacked):
    """Per attack (captures named DEVICE.ATTACK.atWHEN), whether each got its own incident."""
    print("| attack | records | own incident | of them raised by the fan-out look | inside a false incident already open | of those, news to the analyst | reopened a false incident | none | attack records to its incident (median) |")
    print("|---|---|---|---|---|---|---|---|---|")
    by_attack = defaultdict(list)
    for w in attacked:
        by_attack[w["capture"].split(".", 1)[1].rsplit(".at", 1)[0]].append(w)
    total = defaultdict(int)
    for attack, ws in sorted(by_attack.items()):
        own = [w for w in ws if w["first_incident"] and not w["open_at_attack"] and not w.get("attack_reopened")]
        inside = sum(w["open_at_attack"] for w in ws)
        news = sum(w["open_at_attack"] and w.get("attack_news") is not None for w in ws)
        looked = sum(bool(w.get("looks_after")) for w in own)
        back = sum(bool(w.get("attack_reopened")) for w in ws)
        none = sum(w["first_incident"] is None and not w.get("attack_reopened") for w in ws)
        firsts = sorted(w["first_incident"] for w in own)
        median = firsts[len(firsts) // 2] if firsts else "–"
        print(f"| {attack} | {ws[0]['attack']} | {len(own)} of {len(ws)} | {looked} | {inside} | {news} | {back} | {none} | {median} |")
        total["own"] += len(own)
        total["inside"] += inside
        total["news"] += news
        total["looked"] += looked
        total["back"] += back
        total["none"] += none
        total["all"] += len(ws)
    print(f"| **all** | | {total['own']} of {total['all']} | {total['looked']} | {total['inside']} | {total['news']} | {total['back']} | {total['none']} | |")


if __name__ == "__main__":
    main(*sys.argv[1:10])
