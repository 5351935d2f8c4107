"""What one walk through the monitor calls, from a callgrind dump of examples/walk.rs:
the project's own functions (defined under <tree>/src; closures and derived impls left
out), how many distinct ones, in how many files, and how many calls, per walk.

    python3 scripts/walk_count.py DUMP TREE WALKS [--list]
"""
import collections
import re
import sys

DERIVED = re.compile(r"as core::(clone::Clone|default::Default|cmp::\w+|fmt::Debug|hash::Hash)>|serde")


def calls(path, src):
    """(file, function) -> calls, for the calls into functions under `src`."""
    counted = collections.Counter()
    fl = cfl = cfn = None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("fl="):
                fl = line[3:]
            elif line.startswith("fn="):
                cfl = None
            elif line.startswith(("cfi=", "cfl=")):
                cfl = line[4:]
            elif line.startswith("cfn="):
                cfn = line[4:]
            elif line.startswith("calls="):
                callee, cfl = cfl or fl, None
                if callee.startswith(src) and "{{closure}}" not in cfn and not DERIVED.search(cfn):
                    counted[(callee[len(src):], cfn)] += int(line[6:].split()[0])
    return counted


def main():
    path, tree, walks = sys.argv[1], sys.argv[2].rstrip("/"), float(sys.argv[3])
    counted = calls(path, tree + "/src/")
    files = collections.Counter(f for f, _ in counted)
    in_monitor = [k for k in counted if k[0].startswith("monitor/")]
    print(
        f"{len(counted)} functions in {len(files)} files ({len(in_monitor)} functions in monitor/), "
        f"{sum(counted.values()) / walks:.1f} calls per walk"
    )
    if "--list" in sys.argv:
        for (f, fn), n in sorted(counted.items()):
            print(f"  {n / walks:7.2f}  {f}  {fn}")


main()
