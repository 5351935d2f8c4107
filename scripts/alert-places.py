"""Where a device's benign alerts sit, from `metapu-lab week --records FILE`: per capture,
the benign records and their alert rate by their place in their burst (records since
the device's last silence of a minute) and by peer, over the days asked for.

    python3 scripts/alert-places.py RECORDS.csv [--days FIRST LAST]   (days since onboarding, default 0 3)
"""
import collections
import csv
import sys

PLACES = [(0, "1-10"), (10, "11-100"), (100, "101-1000"), (1000, "over 1000")]


def place(n):
    return [name for first, name in PLACES if n >= first][-1]


def main():
    path = sys.argv[1]
    at = sys.argv.index("--days") if "--days" in sys.argv else None
    first, last = (int(sys.argv[at + 1]), int(sys.argv[at + 2])) if at else (0, 3)
    by_place = collections.defaultdict(lambda: collections.Counter())
    by_peer = collections.defaultdict(lambda: collections.Counter())
    with open(path) as f:
        for r in csv.DictReader(f):
            day = float(r["hours"]) // 24
            if r["label"] != "benign" or r["known"] == "1" or r["decision"] == "unscored":
                continue
            if not first <= day <= last:
                continue
            alert = r["decision"] == "anomalous"
            for table, key in ((by_place, place(int(r["burst_record"]))), (by_peer, r["peer"] or "-")):
                table[r["capture"]][(key, "records")] += 1
                table[r["capture"]][(key, "alerts")] += alert
    for capture in sorted(by_place):
        print(f"{capture}, days {first}-{last}, benign alerts by place in the burst:")
        for _, name in PLACES:
            n = by_place[capture][(name, "records")]
            if n:
                a = by_place[capture][(name, "alerts")]
                print(f"  records {name:>9} of a burst: {a:6} of {n:6} ({100 * a / n:.1f} %)")
        peers = sorted({k for k, _ in by_peer[capture]}, key=lambda p: -by_peer[capture][(p, "alerts")])
        print("  by peer (most alerts first):")
        for p in peers[:5]:
            a, n = by_peer[capture][(p, "alerts")], by_peer[capture][(p, "records")]
            print(f"    {p:>18}: {a:6} of {n:6} ({100 * a / n:.1f} %)")


main()
