#!/usr/bin/env python3
"""A small but real DistributedDataParallel training job for ddprun or torchrun: on the GPUs
with NCCL when CUDA is available (one GPU per local rank), else on the CPU with gloo.

    ddprun --standalone --nproc-per-node=gpu examples/ddp_train.py --out-dir /tmp/ckpt
    ddprun --standalone --nproc-per-node=4 examples/ddp_train.py --device cpu

Every worker builds the same synthetic classification data set (a fixed seed: 16 features,
4 classes separated by a random linear teacher), trains an MLP wrapped in DDP on its
DistributedSampler shard, evaluates on a held-out split with the counts summed over all
ranks (all_reduce), and rank 0 prints the loss per epoch and saves a checkpoint. At the end
every rank checks that all replicas hold exactly the same parameters (all_reduce of a
checksum, MIN and MAX) and exits non-zero if not. Works with PyTorch 1.13 and 2.x.

--device auto (the default) picks cuda when torch.cuda.is_available(), else cpu. On cuda,
local rank r uses GPU r (torch.cuda.set_device(LOCAL_RANK)), so start at most as many
workers per node as it has GPUs (--nproc-per-node=gpu does that); more is an error.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--samples", type=int, default=32768)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--out-dir", default="", help="rank 0 saves checkpoint.pt here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="cuda: NCCL, one GPU per local rank; cpu: gloo (default: cuda if "
                   "available)")
    return p.parse_args()


def make_data(n, seed):
    """The same tensors on every rank: 16 features, 4 classes from a linear teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    teacher = torch.randn(16, 4, generator=g)
    y = (x @ teacher + 0.3 * torch.randn(n, 4, generator=g)).argmax(dim=1)
    split = n * 3 // 4
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def param_checksum(model):
    with torch.no_grad():
        return sum(float((p.double() * (i + 1)).sum()) for i, p in enumerate(model.parameters()))


@record
def main():
    args = parse_args()
    t0 = time.time()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            sys.exit(f"local rank {local_rank} has no GPU of its own "
                     f"({torch.cuda.device_count()} visible): start at most that many "
                     "workers per node (--nproc-per-node=gpu)")
        torch.cuda.set_device(local_rank)  # before init: NCCL binds this rank to this GPU
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    # env://: MASTER_ADDR/PORT, RANK, WORLD_SIZE from ddprun.
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts anyway)

    train_set, eval_set = make_data(args.samples, args.seed)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    eval_loader = DataLoader(eval_set, batch_size=256,
                             sampler=DistributedSampler(eval_set, world, rank, shuffle=False))

    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    model = DDP(net, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        print(f"training on {world} workers (this is local rank {local_rank}), "
              f"{len(train_set)} samples, {args.epochs} epochs, on {device} with "
              f"{dist.get_backend()}", flush=True)

    for epoch in range(args.epochs):
        model.train()
        sampler.set_epoch(epoch)  # a different shuffle every epoch, disjoint across ranks
        total = torch.zeros(2, device=device)  # NCCL reduces device tensors only
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            total += torch.tensor([loss.item() * len(y), len(y)], device=device)
        dist.all_reduce(total)  # mean training loss over every rank's samples

        model.eval()
        counts = torch.zeros(2, device=device)
        with torch.no_grad():
            for x, y in eval_loader:
                x, y = x.to(device), y.to(device)
                counts += torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)],
                                       device=device)
        dist.all_reduce(counts)
        if rank == 0:
            print(f"epoch {epoch}: loss {total[0] / total[1]:.4f} "
                  f"eval accuracy {counts[0] / counts[1]:.3f}", flush=True)

    if rank == 0 and args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        path = os.path.join(args.out_dir, "checkpoint.pt")
        torch.save({"model": model.module.state_dict(), "epochs": args.epochs}, path)
        print(f"saved {path}", flush=True)

    # Every replica must hold exactly the same parameters after DDP training.
    s = torch.tensor([param_checksum(model.module)], dtype=torch.float64, device=device)
    lo, hi = s.clone(), s.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    same = bool(lo.item() == hi.item())
    if rank == 0:
        print(f"replicas identical: {same} (checksum {s.item():.6f}); "
              f"{time.time() - t0:.1f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if not same:
        sys.exit(3)


if __name__ == "__main__":
    main()
