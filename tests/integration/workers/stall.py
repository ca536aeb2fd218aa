"""A gloo job for the stall watchdog test (ddprun_test.py stall_watchdog_reports_stacks).

    stall.py <out dir> <seconds>

Attempt 0 (TORCHELASTIC_RESTART_COUNT=0): both ranks first compute for <seconds> without
printing anything (no false alarm may come of it), then rank 1 sleeps forever inside its
training step while rank 0 blocks in all_reduce waiting for it. Attempt 1: every rank
exits 0 at once. Each rank writes <out>/start.<attempt>.<rank> (the time it started) and
<out>/step.<attempt>.<rank> (the time it entered the step). The test looks for the lines
marked "# STALL-..." below in the report's stacks.
"""
import os
import sys
import time


def mark(name):
    with open(os.path.join(sys.argv[1], name), "w") as f:
        f.write(repr(time.time()))


ATTEMPT = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
RANK = int(os.environ["RANK"])
mark(f"start.{ATTEMPT}.{RANK}")


def compute_silently(torch, seconds):
    a, deadline = torch.rand(128, 128), time.time() + seconds
    while time.time() < deadline:
        a = torch.tanh(a @ a)
    return a


def train_step(dist, t):
    mark(f"step.{ATTEMPT}.{RANK}")
    if RANK == 1:
        time.sleep(1e6)  # STALL-SLEEP
    dist.all_reduce(t)  # STALL-ALLREDUCE


def main():
    if ATTEMPT > 0:
        return
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(4)
    compute_silently(torch, float(sys.argv[2]))
    mark(f"computed.{ATTEMPT}.{RANK}")
    dist.all_reduce(t)  # both ranks are connected before the step
    train_step(dist, t)


main()
