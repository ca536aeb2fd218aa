"""A worker whose rank SLOW_RANK sleeps SECONDS before `import torch` (a slow shared file
system, a cold cache): the start-up timeline must name it. Then a few all_reduces, and
the ranks stay up a few seconds more, so that the timeline is complete before the job ends.

    slow_import.py SLOW_RANK SECONDS
"""
import os
import sys
import time

if os.environ["RANK"] == sys.argv[1]:
    time.sleep(float(sys.argv[2]))  # SLOW-IMPORT

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
time.sleep(5)
dist.barrier()
