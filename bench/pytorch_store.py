"""Serves PyTorch's own TCPStore (the C++ server inside torch 1.13) on a free loopback port.

Prints the port on one line, then sleeps until killed. 1.13's server speaks the legacy
dialect only. Run with /usr/bin/python3 (Debian's python3-torch).
"""
import datetime
import sys
import time

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=3600))
print(store.port, flush=True)
sys.stdout.close()
while True:
    time.sleep(3600)
