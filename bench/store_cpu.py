#!/usr/bin/env python3
"""Server CPU per request: ddprun-store builds against PyTorch's own TCPStore servers.

Starts each server once, then runs ddprun-loadgen against each in turn, op by op and
repetition by repetition (interleaved, so a noisy, shared machine slows all of them
alike), and reads each server's utime + stime from /proc/<pid>/stat around every run.
PyTorch 1.13's server (this Python's torch) is driven with the legacy dialect, the only
one it speaks; PyTorch 2.6's (--torch26 scripts/python-torch26: Debian 13's torch in its
chroot; its non-libuv server) with the 2.2+ dialect; each ddprun build with both, the
same load as the server it is compared to. Prints, per op and dialect, the median
microseconds of server CPU per request and each ddprun build's ratio to PyTorch's (of
the medians, and the median of each repetition's ratio), and with --json the raw samples. Run with the Python that has torch 1.13 (/usr/bin/python3):

  bench/store_cpu.py --loadgen build/release/bench/ddprun-loadgen \\
      [--torch26 scripts/python-torch26] build/release/store/ddprun-store [OTHER ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ("set", "get", "add")


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(cmd, port_of):
    # The chroot's runner (scripts/in-chroot) execs its command: proc.pid is the server.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return proc, port_of(proc.stdout.readline())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--torch26", help="python with torch 2.6 (scripts/python-torch26)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", default="2")
    ap.add_argument("--conns", default="64")
    ap.add_argument("--json", help="write the samples (us per request) here")
    ap.add_argument("stores", nargs="+", help="ddprun-store binaries")
    args = ap.parse_args()
    pytorch_store = os.path.join(HERE, "pytorch_store.py")
    # name -> (process, port, dialects it is driven with)
    servers = {"pytorch-1.13": (*start([sys.executable, pytorch_store], int), ["legacy"])}
    if args.torch26:
        servers["pytorch-2.6"] = (*start([args.torch26, pytorch_store], int), ["modern"])
    dialects = ["legacy", "modern"] if args.torch26 else ["legacy"]
    for i, binary in enumerate(args.stores):
        servers[f"ddprun[{i}]"] = (*start([binary, "serve", "--host", "127.0.0.1", "--port", "0"],
                                          lambda line: int(line.rsplit(":", 1)[1])), dialects)
    us = {}
    try:
        for _ in range(args.reps):
            for op in OPS:
                for name, (proc, port, protos) in servers.items():
                    for proto in protos:
                        before = cpu_s(proc.pid)
                        out = subprocess.run(
                            [args.loadgen, "--addr", f"127.0.0.1:{port}", "--proto", proto,
                             "--op", op, "--conns", args.conns, "--seconds", args.seconds,
                             "--warmup", "0", "--value-size", "64", "--timeout", "60"],
                            capture_output=True, text=True, check=True).stdout
                        ops = json.loads(out.strip().splitlines()[-1])["total_ops"]
                        sample = (cpu_s(proc.pid) - before) / ops * 1e6
                        us.setdefault(f"{op} {proto} {name}", []).append(sample)
    finally:
        for proc, _, _ in servers.values():
            proc.kill()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"stores": args.stores, "us_per_op": us}, f, indent=1)
    for i, binary in enumerate(args.stores):
        print(f"ddprun[{i}] = {binary}")
    refs = {"legacy": "pytorch-1.13", "modern": "pytorch-2.6"}
    for op in OPS:
        for proto in dialects:
            ref = statistics.median(us[f"{op} {proto} {refs[proto]}"])
            cells = [f"{refs[proto]} {ref:.2f} us"]
            for name in servers:
                if name.startswith("ddprun"):
                    mine = statistics.median(us[f"{op} {proto} {name}"])
                    # Paired: each repetition's ratio, run minutes apart from the others
                    # but seconds from its reference (a shared machine's load drifts).
                    paired = statistics.median(
                        m / r for m, r in zip(us[f"{op} {proto} {name}"],
                                              us[f"{op} {proto} {refs[proto]}"]))
                    cells.append(f"{name} {mine:.2f} us ({mine / ref:.2f}x; paired {paired:.2f}x)")
            print(f"{op} ({proto}): " + ", ".join(cells))


if __name__ == "__main__":
    main()
