#!/usr/bin/env python3
"""A torch.distributed.launch-era script: reads its local rank from --local_rank.

    ddprun --legacy-launch --nproc-per-node=2 examples/legacy_local_rank.py --steps 2

ddprun --legacy-launch passes --local_rank=N right after the script, as
`python -m torch.distributed.launch` (without --use-env) does; the rest of torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) is set as usual.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", "--local-rank", type=int, required=True)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    assert str(args.local_rank) == os.environ["LOCAL_RANK"], "--local_rank != LOCAL_RANK"

    dist.init_process_group(backend="gloo", init_method="env://")
    torch.manual_seed(0)
    model = DDP(nn.Linear(10, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    for _ in range(args.steps):
        x = torch.randn(20, 10)  # different data per rank: the RNG state diverges after init
        loss = nn.MSELoss()(model(x + dist.get_rank()), torch.randn(20, 10))
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = model.module.weight.detach().clone()
    ref = w.clone()
    dist.broadcast(ref, src=0)
    print(f"local_rank={args.local_rank} rank={dist.get_rank()} "
          f"same_as_rank0={bool(torch.equal(w, ref))}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
