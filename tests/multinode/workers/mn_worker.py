#!/usr/bin/env python3
"""A gloo worker for the multi-node tests.

    MN_OUT=OUT_DIR mn_worker.py [--until-world N] [--steps K] [--step-sleep S] [--fail-rank R]
                 [--fail-once] [--tag T]

Joins the process group (env://), checks an all_reduce of the ranks, records its
environment in OUT_DIR/<restart>_<rank>.json, then runs K steps (all_reduce + sleep).
With --until-world N it keeps stepping (for up to 90 s) while the world size is not N,
so that an elastic test can add or remove nodes while it runs; it exits 0 after K steps in
a world of N. --tag T (a per-node argument, e.g. --tag=node0) is only recorded.
"""
import argparse
import faulthandler
import json
import os
import sys
import time

import torch
import torch.distributed as dist

KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--until-world", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--step-sleep", type=float, default=0.05)
    ap.add_argument("--fail-rank", type=int, default=-1, help="this rank exits 3 after init")
    ap.add_argument("--fail-once", action="store_true",
                    help="--fail-rank fails in the first attempt only")
    ap.add_argument("--tag", default="", help="recorded only: a per-node argument")
    a = ap.parse_args()
    # A hung worker prints where it hangs (and exits) instead of stalling a test silently.
    faulthandler.dump_traceback_later(60, exit=True)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    ok = t.item() == world * (world + 1) / 2
    rec = {k: os.environ.get(k) for k in KEYS}
    rec.update(pid=os.getpid(), t=time.time(), tag=a.tag, allreduce_ok=ok, dist_rank=rank, dist_world=world)
    name = f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}_{rank}_{os.getpid()}.json"
    with open(os.path.join(os.environ["MN_OUT"], name), "w") as f:
        json.dump(rec, f)
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if not ok or (rank == a.fail_rank and (first or not a.fail_once)):
        sys.exit(3)
    deadline = time.monotonic() + 90
    steps = 0
    while steps < a.steps or (a.until_world and world != a.until_world):
        if time.monotonic() > deadline:
            print(f"world stayed {world}, not {a.until_world}", file=sys.stderr)
            sys.exit(4)
        x = torch.ones(1)
        dist.all_reduce(x)
        time.sleep(a.step_sleep)
        steps += 1
    print(f"rank {rank} of {world} done", flush=True)


if __name__ == "__main__":
    main()
