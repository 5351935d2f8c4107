"""Incident opening rules (k of the last n decisions anomalous) on the real-traffic
validation devices only (scripts/real-validation.py's fixed set), from a
`metapu-lab real-traffic` run's per-record scores, in stream order:

    python3 scripts/incident-rules.py RUN_DIR/scores-ours.csv

Per rule: incidents opened during a stream's benign traffic before its attack starts
(false incidents), streams whose attack opens an incident (when none was open), the
median attack records until it opens, and open/close events against anomalous records.
An incident closes after QUIET consecutive normal decisions (the daemon closes after
`incidents.quiet_s` seconds; these scores carry no times). The first LABELED records of
a stream are its onboarding (known normal) and are skipped.
"""
import collections
import csv
import importlib.util
import os
import statistics
import sys

spec = importlib.util.spec_from_file_location(
    "real_validation", os.path.join(os.path.dirname(__file__), "real-validation.py"))
real_validation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real_validation)
VAL = real_validation.VALIDATION
streams = collections.OrderedDict()
for r in csv.DictReader(open(sys.argv[1])):
    if r['device'].rsplit('.',1)[0] in VAL:
        streams.setdefault(r['device'], []).append((int(r['label']), float(r['score'])))
print(len(streams), "validation streams")
LABELED = 10
QUIET = 50
for k,n in [(1,1),(2,3),(3,5),(4,8),(5,10),(6,10),(8,16),(10,20),(16,32)]:
    Q = QUIET
    false_inc=0; streams_false=0; detected=0; lat=[]; benign_total=0; msgs=0; anom=0
    for name, rows in streams.items():
        start = [l for l,_ in rows].index(1)
        recent=collections.deque(maxlen=n); open_=False; quiet=0; f=0; first=None; attack_seen=0
        for i,(l,s) in enumerate(rows):
            if i < LABELED: continue
            a = s > 0.5
            anom += a
            if i < start: benign_total += 1
            if l==1: attack_seen+=1
            recent.append(a)
            if not open_:
                if sum(recent) >= k:
                    open_=True; quiet=0; msgs+=1
                    if i < start: f+=1
                    elif first is None: first = attack_seen
            else:
                quiet = 0 if a else quiet+1
                if quiet >= Q: open_=False; recent.clear(); msgs+=1
        false_inc+=f; streams_false+= f>0
        if first is not None: detected+=1; lat.append(first)
    print(f"k={k:2d} n={n:2d}: false incidents before attack {false_inc:3d} in {streams_false:2d} streams "
          f"(benign records {benign_total}); detected {detected}/{len(streams)}; median attack records to open {statistics.median(lat) if lat else None}; "
          f"within 10: {sum(1 for x in lat if x<=10)}; open/close events {msgs} vs anomalous records {anom}")
