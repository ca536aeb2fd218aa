#!/usr/bin/env python3
"""Connect storms: N clients connect at once and pass an ADD+WAIT barrier, storm after storm.

Starts each server once (ddprun-store builds; with --pytorch also PyTorch 1.13's own
TCPStore server, and with --torch26 PyTorch 2.6's), then runs `ddprun-loadgen --mode
barrier --storms S` against each in turn, repetition by repetition (interleaved), with the
clients spread over --source-ips loopback addresses (one address for 15 000 connections
makes the load generator's connect() search for free ports: its cost, not the server's).
Prints, per server and storm, connect and barrier seconds (medians over the repetitions),
the server's CPU seconds per run of S storms (utime + stime from /proc/<pid>/stat), and
the kernel's listen-queue overflows during the runs (nstat TcpExtListenOverflows,
machine-wide). Exits 1 if any storm failed (a timeout or a reset):

  bench/store_storm.py --loadgen build/release/bench/ddprun-loadgen \\
      build/release/store/ddprun-store [OTHER ...]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from store_cpu import cpu_s, start  # noqa: E402  (store_cpu.py is their home)


def listen_overflows():
    out = subprocess.run(["nstat", "-az", "TcpExtListenOverflows"], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        if line.startswith("TcpExtListenOverflows"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--clients", type=int, default=15000)
    ap.add_argument("--storms", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--source-ips", type=int, default=16)
    ap.add_argument("--proto", default="legacy", choices=["legacy", "modern"])
    ap.add_argument("--pytorch", action="store_true", help="also PyTorch 1.13's server")
    ap.add_argument("--torch26", help="python with torch 2.6: also its server (modern)")
    ap.add_argument("stores", nargs="+", help="ddprun-store binaries")
    args = ap.parse_args()
    # The servers inherit the raised limit (ddprun-store raises its own too).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    pytorch_store = os.path.join(HERE, "pytorch_store.py")
    servers = {}  # name -> (process, port, dialect)
    if args.pytorch:
        servers["pytorch-1.13"] = (*start([sys.executable, pytorch_store], int), "legacy")
    if args.torch26:
        servers["pytorch-2.6"] = (*start([args.torch26, pytorch_store], int), "modern")
    for i, binary in enumerate(args.stores):
        servers[f"ddprun[{i}]"] = (*start([binary, "serve", "--host", "127.0.0.1", "--port", "0"],
                                          lambda line: int(line.rsplit(":", 1)[1])), args.proto)
    runs = {}  # name -> list of (storm lines, server cpu s, overflows)
    failed = False
    try:
        for _ in range(args.reps):
            for name, (proc, port, proto) in servers.items():
                before, overflows = cpu_s(proc.pid), listen_overflows()
                out = subprocess.run(
                    [args.loadgen, "--addr", f"127.0.0.1:{port}", "--proto", proto, "--mode",
                     "barrier", "--conns", str(args.clients), "--storms", str(args.storms),
                     "--source-ips", str(args.source_ips), "--timeout", "60"],
                    capture_output=True, text=True)
                storms = [json.loads(line) for line in out.stdout.splitlines()
                          if line.startswith("{")]
                if out.returncode != 0 or len(storms) != args.storms:
                    failed = True
                    print(f"{name}: FAILED (exit {out.returncode}): {out.stdout.strip()} "
                          f"{out.stderr.strip()}")
                runs.setdefault(name, []).append(
                    (storms, cpu_s(proc.pid) - before, listen_overflows() - overflows))
    finally:
        for proc, _, _ in servers.values():
            proc.kill()
    for i, binary in enumerate(args.stores):
        print(f"ddprun[{i}] = {binary}")
    for name, reps in runs.items():
        cells = []
        for k in range(args.storms):
            got = [r[0][k] for r in reps if len(r[0]) > k and r[0][k]["status"] == "ok"]
            if len(got) < len(reps):
                cells.append(f"storm {k + 1}: {len(reps) - len(got)} of {len(reps)} failed")
            if got:
                c = statistics.median(g["connect_s"] for g in got)
                b = statistics.median(g["barrier_s"] for g in got)
                t = statistics.median(g["total_s"] for g in got)
                cells.append(f"storm {k + 1}: connect {c:.2f} s + barrier {b:.2f} s = {t:.2f} s")
        cpu = statistics.median(r[1] for r in reps)
        over = sum(r[2] for r in reps)
        print(f"{name} ({args.clients} clients, median of {len(reps)}): " + "; ".join(cells) +
              f"; server CPU {cpu:.2f} s per {args.storms} storms; listen overflows {over}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
