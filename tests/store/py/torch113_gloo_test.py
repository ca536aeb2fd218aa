"""A real 4-process gloo job on PyTorch 1.13 whose env:// rendezvous goes through
ddprun-store, as under ddprun's agent: TORCHELASTIC_USE_AGENT_STORE=True makes every rank
a TCPStore client of MASTER_ADDR:MASTER_PORT. Each rank checks its all_reduce result.
Usage: torch113_gloo_test.py PATH/TO/ddprun-store   (exit 77 = skipped: no torch)"""
import os
import sys
from datetime import timedelta

from store_proc import StoreProcess, cli, fork, require_torch, watchdog

WORLD = 4


def rank_main(port, rank):
    os.environ.update({
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(WORLD),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "GLOO_SOCKET_IFNAME": "lo",  # keep gloo's own connections on loopback
    })
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = float(sum(range(1, WORLD + 1)))
    if t.item() != expected:
        print(f"rank {rank}: all_reduce gave {t.item()}, expected {expected}", flush=True)
        sys.exit(1)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: all_reduce = {t.item()}", flush=True)


def main(binary):
    require_torch()
    import torch.distributed  # noqa: F401  (imported once; forked ranks share it)
    watchdog(180)
    with StoreProcess(binary) as store:
        ranks = [fork(rank_main, store.port, r) for r in range(WORLD)]
        failed = []
        for r, p in enumerate(ranks):
            p.join(timeout=150)
            if p.exitcode != 0:
                failed.append((r, p.exitcode))
        if failed:
            raise AssertionError(f"ranks failed (rank, exit code): {failed}")
        # Every rank's client counted itself in init/ (1.13 agent-store mode).
        rc, out, _ = cli(binary, "get", f"--addr=127.0.0.1:{store.port}", "init/")
        if rc != 0 or out != f"{WORLD}\n":
            raise AssertionError(f"init/ is {out!r}, expected {WORLD}")
        keys = cli(binary, "keys", f"--addr=127.0.0.1:{store.port}")[1].split()
        if not any(k.startswith("//worker/attempt_0/default_pg/") for k in keys):
            raise AssertionError(f"no 1.13 agent-store keys among {keys}")
        status = store.stop()
        if status != 0:
            raise AssertionError(f"ddprun-store exited {status}")
    print("torch113_gloo_test: ok")


if __name__ == "__main__":
    main(sys.argv[1])
