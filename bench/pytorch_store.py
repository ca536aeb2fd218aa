"""Serves PyTorch's own TCPStore (the C++ server inside torch) on a free loopback port.

Prints the port on one line, then sleeps until killed. 1.13's server speaks the legacy
dialect only (run with /usr/bin/python3, Debian 12's python3-torch); 2.x's non-libuv
server the 2.2+ dialect (Debian 13's 2.6 has no libuv: scripts/python-torch26).
"""
import datetime
import sys
import time

import torch.distributed as dist

import torch

kwargs = {"use_libuv": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=3600), **kwargs)
print(store.port, flush=True)
sys.stdout.close()
while True:
    time.sleep(3600)
