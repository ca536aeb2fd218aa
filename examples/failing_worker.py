#!/usr/bin/env python3
"""A job whose rank --fail-rank raises, to show ddprun's (torchrun's) failure report.

    ddprun --nproc-per-node=2 examples/failing_worker.py --fail-rank 1

@record writes the exception and traceback to TORCHELASTIC_ERROR_FILE; the launcher reads
it and prints the "Root Cause" block with that traceback, then exits 1. With
--max-restarts=N and --fail-attempts K, the job fails K times and then succeeds
(TORCHELASTIC_RESTART_COUNT tells the attempt).
"""
import argparse
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--fail-attempts", type=int, default=1 << 30)
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if rank == args.fail_rank and attempt < args.fail_attempts:
        raise ValueError(f"rank {rank} failed on purpose (attempt {attempt})")
    if rank != args.fail_rank:
        time.sleep(0.2)
    print(f"rank {rank} ok on attempt {attempt}", flush=True)


if __name__ == "__main__":
    main()
