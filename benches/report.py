"""Assemble docs/benchmarks.md's measured section from the outputs `make bench`
left in runs/bench/, with the machine, commit and command. Text outside the
<!-- bench:begin --> / <!-- bench:end --> markers is kept as written."""

import datetime
import os
import platform
import subprocess
import sys


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = next(l for l in open("/proc/meminfo") if l.startswith("MemTotal")).split()[1]
        mem = f"{int(mem) / 2**20:.0f} GiB"
    except (OSError, StopIteration):
        mem = "?"
    return f"{cpu}, {os.cpu_count()} cores, {mem}, {platform.system()} {platform.release()}"


def main():
    runs, doc = sys.argv[1], sys.argv[2]
    parts = [
        ("Compute bound and daemon engine (`cargo bench --bench daemon`)", "daemon.md"),
        ("End to end through the bundled broker (`cargo bench --bench e2e`)", "e2e.md"),
        ("Peers on the same labeled stream (`cargo bench --bench stream`, `benches/peers.py`)", "peers.md"),
        ("Model: meta-training and adaptation (`cargo bench --bench model`)", "model.md"),
        ("A fleet's adaptation, 10,000 devices (`cargo bench --bench adapt`)", "adapt.md"),
        ("The live capture sensor's extraction (`cargo bench --bench sensor`)", "sensor.md"),
        ("The state topic: bytes per device-hour and restore (`cargo bench --bench state`)", "state.md"),
    ]
    dirty = sh("git", "status", "--porcelain", "--untracked-files=no")
    commit = sh("git", "rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")
    lines = [
        "<!-- bench:begin -->",
        f"Measured by `make bench` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}.",
        f"Machine: {machine()}.",
        "",
    ]
    for title, name in parts:
        path = os.path.join(runs, name)
        if not os.path.exists(path):
            continue
        lines += [f"### {title}", "", open(path).read().strip(), ""]
    lines.append("<!-- bench:end -->")
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n\n<!-- bench:begin -->\n<!-- bench:end -->\n"
    begin, end = text.find("<!-- bench:begin -->"), text.find("<!-- bench:end -->")
    if begin < 0 or end < 0:
        text = text.rstrip() + "\n\n<!-- bench:begin -->\n<!-- bench:end -->\n"
        begin, end = text.find("<!-- bench:begin -->"), text.find("<!-- bench:end -->")
    text = text[:begin] + "\n".join(lines) + text[end + len("<!-- bench:end -->"):]
    open(doc, "w").write(text)
    print(f"wrote {doc}")


if __name__ == "__main__":
    main()
