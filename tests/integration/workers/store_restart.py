"""Integration-test worker (torch): on attempt 0, writes a key into the workers' store and
rank 1 fails; on attempt 1, checks that the key is gone (the store was reset) and that
TORCHELASTIC_RESTART_COUNT went up, then trains one DDP step. argv: <out_dir>.
The workers' store is the agent's (TORCHELASTIC_USE_AGENT_STORE=True) or, under
USE_LIBUV=0, the one worker rank 0 hosts for the process group (a new one per attempt)."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

from torch.distributed.elastic.multiprocessing.errors import record


def present(store, key):
    """1.13's Python TCPStore has no check(): a short wait tells whether the key exists."""
    try:
        store.wait([key], datetime.timedelta(milliseconds=300))
        return True
    except RuntimeError:
        return False


@record
def main():
    out_dir = sys.argv[1]
    rank = int(os.environ["RANK"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    agent_store = os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    if agent_store:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              int(os.environ["WORLD_SIZE"]), False,
                              datetime.timedelta(seconds=30))
    else:
        dist.init_process_group("gloo")
        store = dist.distributed_c10d._get_default_store()
    if attempt == 0:
        store.set(f"stale{rank}", "from attempt 0")
        store.add("stale_counter", 1)
        assert present(store, f"stale{rank}"), "the presence probe cannot see a set key"
        if rank == 1:
            raise RuntimeError("rank 1 fails attempt 0 on purpose")
        import time
        time.sleep(30)  # stopped by the agent when rank 1 fails
    stale = [k for k in ("stale0", "stale1", "stale_counter") if present(store, k)]
    if agent_store:
        dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.randn(8, 4) + rank).sum().backward()
    w = model.module.weight.grad.clone()
    ref = w.clone()
    dist.broadcast(ref, 0)
    with open(os.path.join(out_dir, f"attempt{attempt}.{rank}"), "w") as f:
        f.write(f"stale={','.join(stale)} same_grad={torch.equal(w, ref)}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
