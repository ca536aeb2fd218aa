#!/usr/bin/env python3
"""fr_overhead.py: what PyTorch's flight recorder, and ddprun's reading of it, cost a
training job (issues 32 and 34: the job-wide hang verdict, the straggler ranking and the
start-up timeline switch it on under --stall-timeout). Runs examples/ddp_train.py under
ddprun (--standalone, K CPU workers, gloo) four ways, interleaved: the recorder off;
TORCH_FR_BUFFER_SIZE=N alone (recording only); --stall-timeout (ddprun's own buffer of
256, and the stack probe's thread reading the recorder once a second for the verdict, the
stragglers and the start-up timeline); and --stall-timeout with TORCH_FR_BUFFER_SIZE=0
(the stack sampler alone, no recorder to read). The order of the modes is shuffled in
each round (seeded, --seed), so that a load rising or falling over the run is not
charged to the mode that always runs last. With the PyTorch 2.14 tier's interpreter
(scripts/python-torch214: Debian sid's torch, whose generic recorder also records gloo);
prints each run's training time as the script reports it, then the medians and the ratios
to the recorder off, and each mode's ratios paired by round (median and range). Standard
library only.

    bench/fr_overhead.py [--ddprun build/bench/launcher/ddprun] [--runs 5] [--workers 2]
                         [--buffer 2000] [--epochs 3] [--samples 65536] [--seed 1]
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(a, buffer, flags=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR", "PET_"))}
    env.update(PYTHON_EXEC=str(ROOT / "scripts" / "python-torch214"), USE_LIBUV="0")
    if buffer is not None:
        env["TORCH_FR_BUFFER_SIZE"] = str(buffer)
    r = subprocess.run([a.ddprun, "--standalone", f"--nproc-per-node={a.workers}", *flags,
                        str(ROOT / "examples" / "ddp_train.py"), "--device", "cpu",
                        "--epochs", str(a.epochs), "--samples", str(a.samples)],
                       env=env, capture_output=True, text=True, timeout=900)
    m = re.search(r"replicas identical: True \(checksum [-0-9.e]+\); ([0-9.]+) s", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit(f"run failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddprun", default=str(ROOT / "build" / "bench" / "launcher" / "ddprun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--buffer", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    # None: the variable unset (under --stall-timeout ddprun then sets its own buffer).
    modes = [("recorder off", None, ()), (f"TORCH_FR_BUFFER_SIZE={a.buffer}", a.buffer, ()),
             ("--stall-timeout=600 (ddprun reads it)", None, ("--stall-timeout=600",)),
             ("--stall-timeout=600, TORCH_FR_BUFFER_SIZE=0 (sampler only)", 0,
              ("--stall-timeout=600",))]
    times = {name: [] for name, _, _ in modes}
    order = random.Random(a.seed)
    for r in range(a.runs):
        for name, buffer, flags in order.sample(modes, len(modes)):
            load = os.getloadavg()[0]
            t = one_run(a, buffer, flags)
            times[name].append(t)
            print(f"run {r + 1} {name:>40}: {t:.2f} s, load {load:.1f}", flush=True)
    steps = a.epochs * (a.samples * 3 // 4) // (64 * a.workers)  # the train split, batch 64
    base = statistics.median(times["recorder off"])
    off = times["recorder off"]
    for name, _, _ in modes:
        m = statistics.median(times[name])
        # Paired: each round's time against the same round's recorder off, so that a load
        # drifting over the rounds cancels out.
        paired = [t / o for t, o in zip(times[name], off)]
        print(f"median {name}: {m:.2f} s (x{m / base:.3f}); paired by round: median "
              f"x{statistics.median(paired):.3f}, {min(paired):.3f}-{max(paired):.3f}")
    print(f"about {steps} DDP steps a run per worker")


if __name__ == "__main__":
    main()
