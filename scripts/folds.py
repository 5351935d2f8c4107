"""Leave devices out, in two folds: which devices of the real-traffic benchmark
(scripts/benchmark-devices.sh) a model may meta-train on, when it scores the target
devices or the validation devices of scripts/real-validation.py. The shipped model
(make iot-model) scores the target devices and trains on validation devices; the
validation devices, where choices are made, are scored by the same recipe trained on
target devices instead.

A device is a source only when it shares no capture and no MAC with a device scored:
never a host of Kitsune's camera network (one capture holds them all, and a packet
between two hosts is in both hosts' rows), and never a device whose MAC a scored device
has (IoT Sentinel's D-Link door sensor was set up through the D-Link home hub, under
the hub's MAC).

    python3 scripts/folds.py scored target|validation    the devices that fold scores
    python3 scripts/folds.py sources target|validation   the devices its model may train on
"""
import os
import subprocess
import sys
from importlib import import_module

sys.path.insert(0, os.path.dirname(__file__))
VALIDATION = import_module("real-validation").VALIDATION


def devices():
    """(name, MAC) of every benchmark device, in scripts/benchmark-devices.sh's order."""
    script = os.path.join(os.path.dirname(__file__), "benchmark-devices.sh")
    lines = subprocess.run(["bash", script], check=True, capture_output=True, text=True).stdout
    return [tuple(line.split()[:2]) for line in lines.splitlines()]


def scored(fold, all_devices):
    return [name for name, _ in all_devices if (name in VALIDATION) == (fold == "validation")]


def sources(fold, all_devices):
    """Devices of IoT Sentinel outside `fold` that share no MAC with a device of it
    (every IoT Sentinel device has captures of its own)."""
    names = set(scored(fold, all_devices))
    macs = {mac for name, mac in all_devices if name in names}
    return [
        name
        for name, mac in all_devices
        if name.startswith("sentinel-") and name not in names and mac not in macs
    ]


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("scored", "sources") or sys.argv[2] not in ("target", "validation"):
        sys.exit(__doc__)
    what, fold = sys.argv[1:]
    print(" ".join((scored if what == "scored" else sources)(fold, devices())))


if __name__ == "__main__":
    main()
