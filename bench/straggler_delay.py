#!/usr/bin/env python3
"""straggler_delay.py: how many training steps pass before ddprun names a straggler (issue
34's benchmark "straggler detection delay in steps"). Starts a 2-node c10d job on this
machine (agents on 127.0.0.1 and 127.0.0.2, one CPU worker each, gloo, the PyTorch 2.14
tier: scripts/python-torch214) under --stall-timeout with --straggler-window W; the last
rank sleeps --late s before each all_reduce (bench/straggler_worker.py). Reads node 0's
console as it comes and counts rank 0's steps printed before node 0's "straggler:" line;
prints, per window and run, the steps and the seconds from the first step to the line,
then the medians. No peer launcher names stragglers: there is nothing to compare against,
so these are counts, not ratios. Standard library only.

    bench/straggler_delay.py [--ddprun build/bench/launcher/ddprun] [--windows 5 10]
                             [--runs 3] [--late 0.3]
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(a, window):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR", "PET_"))}
    env.update(PYTHON_EXEC=str(ROOT / "scripts" / "python-torch214"), USE_LIBUV="0")
    port, seconds = free_port(), 2 * window + 30
    agents = []
    for i in range(2):
        argv = [a.ddprun, "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}", f"--local-addr=127.0.0.{i + 1}",
                "--rdzv-id=strag_delay", "--stall-timeout=600", f"--straggler-window={window}",
                str(ROOT / "bench" / "straggler_worker.py"), str(seconds), str(a.late)]
        agents.append(subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT if i == 0 else subprocess.DEVNULL))
    steps, first, found = 0, None, None
    for line in agents[0].stdout:
        if "STEP " in line:
            steps += 1
            first = first or time.monotonic()
        elif "warning: straggler: " in line:
            found = (steps, time.monotonic() - (first or time.monotonic()))
            break
    for p in agents:
        p.terminate()
    for p in agents:
        p.wait(60)
    if not found:
        sys.exit(f"window {window}: no straggler line within the run")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddprun", default=str(ROOT / "build" / "bench" / "launcher" / "ddprun"))
    ap.add_argument("--windows", type=float, nargs="+", default=[5, 10])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--late", type=float, default=0.3)
    a = ap.parse_args()
    for w in a.windows:
        rows = []
        for r in range(a.runs):
            load = os.getloadavg()[0]
            steps, secs = one_run(a, w)
            rows.append((steps, secs))
            print(f"window {w:g} s, run {r + 1}: named after {steps} steps, {secs:.1f} s after "
                  f"the first step (load {load:.1f})", flush=True)
        print(f"window {w:g} s: median {statistics.median(s for s, _ in rows):g} steps, "
              f"{statistics.median(t for _, t in rows):.1f} s", flush=True)


if __name__ == "__main__":
    main()
