"""Send a classic pcap's frames, in order, out of one interface (AF_PACKET).

The sensor tests run this inside their own network namespace, on one end of a veth
pair whose other end the sensor captures. Prints the frames sent.
usage: send_frames.py INTERFACE CAPTURE.pcap [PAUSE_EVERY_N_FRAMES]
"""
import socket
import struct
import sys
import time

interface, path = sys.argv[1], sys.argv[2]
pause_every = int(sys.argv[3]) if len(sys.argv) > 3 else 0
data = open(path, "rb").read()
# Classic pcap, microsecond or nanosecond, either byte order (times are not used).
endian = {
    b"\xd4\xc3\xb2\xa1": "<",
    b"\xa1\xb2\xc3\xd4": ">",
    b"\x4d\x3c\xb2\xa1": "<",
    b"\xa1\xb2\x3c\x4d": ">",
}.get(data[:4])
if endian is None:
    sys.exit(f"{path}: not a classic pcap")
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((interface, 0))
at, sent = 24, 0
while at + 16 <= len(data):
    _, _, caplen, _ = struct.unpack(endian + "IIII", data[at : at + 16])
    s.send(data[at + 16 : at + 16 + caplen])
    at += 16 + caplen
    sent += 1
    if pause_every and sent % pause_every == 0:
        time.sleep(0.001)
print(sent)
