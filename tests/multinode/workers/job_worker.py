#!/usr/bin/env python3
"""A gloo worker for the job-wide view tests (multinode_test.py stall_*, root_cause_*).

    job_worker.py evaluate <seconds>   rank 0 computes silently for <seconds> (the common
                                         `if rank == 0: evaluate()`) while the others wait
                                         in a barrier; then every rank exits 0
    job_worker.py raise                  the last rank raises ValueError (RAISE) while the
                                         others wait in an all_reduce, which then fails
    job_worker.py mismatch               the last rank calls broadcast (MISMATCH-BROADCAST)
                                         where the others call all_reduce
    job_worker.py straggle SECONDS       for SECONDS, all_reduce in a loop, the last rank
                                         0.3 s late each time
    job_worker.py steady SECONDS         for SECONDS, all_reduce in a loop, every rank alike
                                         (0.02 s before each); rank 0 prints how many
    job_worker.py straggle-out WORLD     while the job has WORLD ranks, straggle for 120 s, the
                                         last rank 0.15 s late (the job must leave the last
                                         rank's node out first); in a smaller round, 5
                                         all_reduces and exit 0
    job_worker.py doze SECONDS           the last rank sleeps SECONDS (STATUS-SLEEP) before
                                         an all_reduce the others wait in; then every rank
                                         exits 0
    job_worker.py hang                   the last rank sleeps forever before its all_reduce
                                         (STALL-SLEEP) while the others wait in it
                                         (STALL-ALLREDUCE); a restarted attempt exits 0

The tests look for the lines marked "# STALL-..." in the verdict.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def evaluate(seconds):
    a, deadline = torch.rand(128, 128), time.time() + seconds
    while time.time() < deadline:
        a = torch.tanh(a @ a)


def step(rank, world):
    t = torch.ones(4)
    if rank == world - 1:
        time.sleep(1e6)  # STALL-SLEEP
    dist.all_reduce(t)  # STALL-ALLREDUCE


def doze(rank, world, seconds):
    t = torch.ones(4)
    if rank == world - 1:
        time.sleep(seconds)  # STATUS-SLEEP
    dist.all_reduce(t)


def mismatch(rank, world):
    t = torch.ones(4)
    if rank == world - 1:
        dist.broadcast(t, 0)  # MISMATCH-BROADCAST
    else:
        dist.all_reduce(t)


def all_reduce_until(deadline, world):
    # One all_reduce of a step, which also carries whether this rank's time is up: every
    # rank leaves the loop after the same step. (Each rank's own clock check alone let one
    # rank reach the barrier while the others entered one more all_reduce: a real hang.)
    t = torch.full((4,), 1.0 if time.time() < deadline else 0.0)
    dist.all_reduce(t)
    return t[0].item() == world


def straggle(rank, world, seconds, late=0.3):
    # The last rank sleeps `late` s before each all_reduce, the others 0.02 s.
    deadline = time.time() + seconds
    while True:
        time.sleep(late if rank == world - 1 else 0.02)
        if not all_reduce_until(deadline, world):
            break
    dist.barrier()


def steady(rank, world, seconds):
    deadline, steps = time.time() + seconds, 0
    while True:
        time.sleep(0.02)
        steps += 1
        if not all_reduce_until(deadline, world):
            break
    dist.barrier()
    if rank == 0:
        print(f"steady: {steps} all_reduces", flush=True)


def fail(rank, world):
    if rank == world - 1:
        time.sleep(0.5)  # the others are in the all_reduce by now
        raise ValueError("boom on the last rank")  # RAISE
    dist.all_reduce(torch.ones(4))


def main():
    if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) > 0:
        return
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(torch.ones(1))  # every rank connected
    if sys.argv[1] == "evaluate":
        if rank == 0:
            evaluate(float(sys.argv[2]))
        dist.barrier()
        # PyTorch 1.13's gloo teardown at exit may abort ("terminate called without an
        # active exception") when the peer is gone first: not what these tests are about.
        os._exit(0)
    elif sys.argv[1] == "raise":
        fail(rank, world)
    elif sys.argv[1] == "mismatch":
        mismatch(rank, world)
    elif sys.argv[1] == "doze":
        doze(rank, world, float(sys.argv[2]))
        os._exit(0)  # as evaluate: no gloo teardown race at exit
    elif sys.argv[1] == "straggle":
        straggle(rank, world, float(sys.argv[2]))
    elif sys.argv[1] == "steady":
        steady(rank, world, float(sys.argv[2]))
    elif sys.argv[1] == "straggle-out":
        if world == int(sys.argv[2]):
            straggle(rank, world, 120, late=0.15)
        else:
            for _ in range(5):
                dist.all_reduce(torch.ones(4))
            dist.barrier()
    else:
        step(rank, world)


main()
