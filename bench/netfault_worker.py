#!/usr/bin/env python3
"""bench/netfault_worker.py: the gloo worker of bench/netfault.py. Joins the process
group (env://), marks $NF_OUT/running<RANK> once its first all_reduce is done, then runs
an all_reduce every 0.1 s for 300 s, then exits 0. Its TCPStore (2.x) defaults to
use_libuv=False (as bench/torchrun26.py's): sid's PyTorch 2.14 has no libuv, and a client
of torchrun's agent store is made without the argument."""
import importlib
import os
import time

import torch
import torch.distributed as dist

rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module, not the function

_TCPStore = rdzv.TCPStore


class _NoLibuvTCPStore(_TCPStore):
    def __init__(self, *args, use_libuv=False, **kwargs):
        super().__init__(*args, use_libuv=use_libuv, **kwargs)


if int(torch.__version__.split(".")[0]) >= 2:  # 1.13 has no use_libuv
    rdzv.TCPStore = _NoLibuvTCPStore

dist.init_process_group("gloo")
x = torch.ones(1)
dist.all_reduce(x)
open(os.path.join(os.environ["NF_OUT"], f"running{os.environ['GROUP_RANK']}"), "w").close()
end = time.monotonic() + 300
while time.monotonic() < end:
    dist.all_reduce(x)
    time.sleep(0.1)
