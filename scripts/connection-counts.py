#!/usr/bin/env python3
"""The most TCP connection attempts (SYN without ACK) one sender made to one host and port
within any 5 minutes, per capture: how many connections benign devices open to one service,
against a password guesser's (docs/experiments/2026-11-29-learning-never-hides-an-attack.md).

    scripts/connection-counts.py CAPTURE... [--top N]

Reads classic pcap and pcapng (Ethernet, IPv4). Prints the N highest (default 12):
count, capture, host, port.
"""
import struct
import sys
from collections import defaultdict

WINDOW_S = 300.0


def frames(path):
    data = open(path, "rb").read()
    magic = data[:4]
    if magic == b"\x0a\x0d\x0d\x0a":
        at, little = 0, True
        while at + 12 <= len(data):
            kind, length = struct.unpack("<II", data[at:at + 8])
            if length < 12:
                return
            if kind == 6:
                _, high, low, captured, _ = struct.unpack("<IIIII", data[at + 8:at + 28])
                yield ((high << 32) | low) / 1e6, data[at + 28:at + 28 + captured]
            at += length
        return
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    scale = 1e9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e6
    at = 24
    while at + 16 <= len(data):
        seconds, fraction, captured, _ = struct.unpack(order + "IIII", data[at:at + 16])
        yield seconds + fraction / scale, data[at + 16:at + 16 + captured]
        at += 16 + captured


def most_attempts(path):
    times = defaultdict(list)
    best = defaultdict(int)
    for ts, f in frames(path):
        if len(f) < 34 or f[12:14] != b"\x08\x00" or f[23] != 6:
            continue
        l4 = 14 + (f[14] & 15) * 4
        if len(f) < l4 + 14 or f[l4 + 13] & 0x12 != 0x02:
            continue
        key = (f[6:12], f[30:34], struct.unpack(">H", f[l4 + 2:l4 + 4])[0])
        window = times[key]
        window.append(ts)
        while window[0] < ts - WINDOW_S:
            window.pop(0)
        best[key] = max(best[key], len(window))
    return best


def main(args):
    top = 12
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        args = args[:i] + args[i + 2:]
    found = []
    for path in args:
        for (_, host, port), n in most_attempts(path).items():
            found.append((n, path, ".".join(map(str, host)), port))
    for n, path, host, port in sorted(found, reverse=True)[:top]:
        print(f"{n}\t{path}\t{host}\t{port}")


if __name__ == "__main__":
    main(sys.argv[1:])
