#!/usr/bin/env python3
"""The device's busiest public peer, by the name it looked the peer up by (its DNS
answers), else by address, and ten times the most it sent that peer in one 5-minute
window (at least 2 MiB; windows as the far-more-than-usual look counts them: each opens
at the first packet after the last one closed): the `upload` attack of
scripts/week-data.sh's never-learned set, far more than usual to the device's own cloud.
Prints one of the peer's addresses and the bytes.
Usage: scripts/usual-upload.py CAPTURE.pcap MAC  ->  "ADDRESS BYTES"."""
import ipaddress
import struct
import sys
from collections import defaultdict

WINDOW_S = 300.0


def packets(path):
    with open(path, "rb") as f:
        head = f.read(24)
        order = {b"\xd4\xc3\xb2\xa1": ("<", 1e6), b"\x4d\x3c\xb2\xa1": ("<", 1e9),
                 b"\xa1\xb2\xc3\xd4": (">", 1e6), b"\xa1\xb2\x3c\x4d": (">", 1e9)}.get(head[:4])
        if order is None:
            sys.exit(f"{path}: not a classic pcap")
        while len(record := f.read(16)) == 16:
            sec, frac, incl, orig = struct.unpack(order[0] + "IIII", record)
            yield sec + frac / order[1], orig, f.read(incl)


def skip_name(m, i):
    while i < len(m):
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += n + 1
    return i


def read_name(m, i):
    labels = []
    for _ in range(64):
        n = m[i]
        if n == 0:
            break
        if n & 0xC0 == 0xC0:
            i = ((n & 0x3F) << 8) | m[i + 1]
            continue
        labels.append(m[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += n + 1
    return ".".join(labels).lower()


def answers(dns):
    """(address, asked name) of a DNS answer's A records."""
    try:
        qd, an = struct.unpack(">HH", dns[4:8])
        if qd < 1:
            return []
        name, i = read_name(dns, 12), 12
        for _ in range(qd):
            i = skip_name(dns, i) + 4
        out = []
        for _ in range(an):
            i = skip_name(dns, i)
            kind, _, _, length = struct.unpack(">HHIH", dns[i:i + 10])
            i += 10
            if kind == 1 and length == 4:
                out.append((str(ipaddress.IPv4Address(dns[i:i + 4])), name))
            i += length
        return out
    except (IndexError, struct.error):
        return []


def main():
    path, mac = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", ""))
    named, sent = {}, defaultdict(list)
    for ts, length, frame in packets(path):
        ip = 14
        while frame[ip - 2:ip] in (b"\x81\x00", b"\x88\xa8"):  # VLAN tags
            ip += 4
        if frame[ip - 2:ip] != b"\x08\x00" or len(frame) < ip + 20:
            continue
        udp = ip + (frame[ip] & 15) * 4
        if frame[0:6] == mac and frame[ip + 9] == 17 and frame[udp:udp + 2] == b"\x00\x35":
            named.update(answers(frame[udp + 8:]))
        if frame[6:12] != mac:
            continue
        peer = ipaddress.IPv4Address(frame[ip + 16:ip + 20])
        if peer.is_private or peer.is_multicast or peer.is_link_local or peer.is_reserved:
            continue
        sent[named.get(str(peer), str(peer))].append((ts, length, str(peer)))
    if not sent:
        sys.exit(f"{path}: the device sent nothing to a public peer")
    peer = max(sent, key=lambda p: sum(n for _, n, _ in sent[p]))
    most, start, window = 0, None, 0
    for ts, length, _ in sent[peer]:
        if start is None or ts >= start + WINDOW_S:
            start, window = ts, 0
        window += length
        most = max(most, window)
    print(sent[peer][-1][2], max(10 * most, 2 << 20))


main()
