#!/usr/bin/env python3
"""straggler_worker.py: bench/straggler_delay.py's worker: a gloo all_reduce loop for
SECONDS in which the last rank sleeps LATE s before each all_reduce (the others 0.02 s);
rank 0 prints "STEP <n>" after each step, so the bench counts the steps done before
ddprun names the straggler.

    straggler_worker.py SECONDS LATE
"""
import sys
import time

import torch
import torch.distributed as dist


def main():
    seconds, late = float(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    deadline, n, going = time.time() + seconds, 0, True
    while going:
        time.sleep(late if rank == world - 1 else 0.02)
        # The step's all_reduce also carries whether this rank's time is up, so that every
        # rank leaves the loop after the same step (a rank's own clock alone could send it
        # to the barrier while the others enter one more all_reduce).
        t = torch.full((4,), 1.0 if time.time() < deadline else 0.0)
        dist.all_reduce(t)
        going = t[0].item() == world
        n += 1
        if rank == 0:
            print(f"STEP {n}", flush=True)
    dist.barrier()


main()
