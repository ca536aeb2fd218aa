#!/usr/bin/env python3
"""Server CPU per request: ddprun-store builds against PyTorch 1.13's own TCPStore server.

Starts each server once, then runs ddprun-loadgen (legacy dialect, the only one 1.13
speaks) against each in turn, op by op and repetition by repetition (interleaved, so a
noisy, shared machine slows all of them alike), and reads each server's utime + stime
from /proc/<pid>/stat around every run. Prints, per op, the median microseconds of
server CPU per request and each ddprun build's ratio to PyTorch's. Run with the Python
that has torch 1.13 (/usr/bin/python3):

  bench/store_cpu.py --loadgen build/release/bench/ddprun-loadgen \
      build/release/store/ddprun-store [OTHER-DDPRUN-STORE ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(cmd, port_of):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return proc, port_of(proc.stdout.readline())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", default="2")
    ap.add_argument("--conns", default="64")
    ap.add_argument("stores", nargs="+", help="ddprun-store binaries")
    args = ap.parse_args()
    servers = {"pytorch-1.13": start([sys.executable, os.path.join(HERE, "pytorch_store.py")],
                                     int)}
    for i, binary in enumerate(args.stores):
        servers[f"ddprun[{i}]"] = start([binary, "serve", "--host", "127.0.0.1", "--port", "0"],
                                        lambda line: int(line.rsplit(":", 1)[1]))
    us = {}
    try:
        for _ in range(args.reps):
            for op in ("set", "get", "add"):
                for name, (proc, port) in servers.items():
                    before = cpu_s(proc.pid)
                    out = subprocess.run(
                        [args.loadgen, "--addr", f"127.0.0.1:{port}", "--proto", "legacy",
                         "--op", op, "--conns", args.conns, "--seconds", args.seconds,
                         "--warmup", "0", "--value-size", "64", "--timeout", "60"],
                        capture_output=True, text=True, check=True).stdout
                    ops = json.loads(out.strip().splitlines()[-1])["total_ops"]
                    us.setdefault((op, name), []).append((cpu_s(proc.pid) - before) / ops * 1e6)
    finally:
        for proc, _ in servers.values():
            proc.kill()
    for i, binary in enumerate(args.stores):
        print(f"ddprun[{i}] = {binary}")
    for op in ("set", "get", "add"):
        ref = statistics.median(us[(op, "pytorch-1.13")])
        cells = [f"pytorch-1.13 {ref:.2f} us"]
        for name in servers:
            if name != "pytorch-1.13":
                mine = statistics.median(us[(op, name)])
                cells.append(f"{name} {mine:.2f} us ({mine / ref:.2f}x)")
        print(f"{op}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
