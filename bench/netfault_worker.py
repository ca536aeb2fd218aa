#!/usr/bin/env python3
"""bench/netfault_worker.py: the gloo worker of bench/netfault.py. Joins the process
group (env://), marks $NF_OUT/running<RANK> once its first all_reduce is done, then runs
an all_reduce every 0.1 s for 300 s, then exits 0."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.ones(1)
dist.all_reduce(x)
open(os.path.join(os.environ["NF_OUT"], f"running{os.environ['GROUP_RANK']}"), "w").close()
end = time.monotonic() + 300
while time.monotonic() < end:
    dist.all_reduce(x)
    time.sleep(0.1)
