"""ddp_worker.py: the worker of the package tests' 2-worker job (tests/package/package_test.py):
joins the gloo process group through ddprun's store, all-reduces its rank + 1, and writes
what it ran with (sum, interpreter, sys.prefix, torch version) to REPORT_DIR/<rank>.json.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
report = {"rank": dist.get_rank(), "sum": t.item(), "executable": sys.executable,
          "prefix": sys.prefix, "torch": torch.__version__}
with open(os.path.join(sys.argv[1], "%d.json" % dist.get_rank()), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
