"""Runs Debian 13's torchrun (PyTorch 2.6) or sid's (2.14), both built without libuv, with
one default changed.

torch 2.x's TCPStore defaults to use_libuv=True, and torchrun's own c10d rendezvous store
ignores USE_LIBUV=0, so on a build without libuv torchrun fails before it starts a worker
("use_libuv was requested but PyTorch was build without libuv support"). This wrapper
makes TCPStore default to use_libuv=False (an explicit argument still wins) and then calls
torch.distributed.run.main() unchanged. Run it with USE_LIBUV=0 too, so that workers that
call init_process_group() host their own non-libuv store. For tests and bench/ only.
"""
import sys

import torch.distributed as dist

_TCPStore = dist.TCPStore


class _NoLibuvTCPStore(_TCPStore):
    def __init__(self, *args, use_libuv=False, **kwargs):
        super().__init__(*args, use_libuv=use_libuv, **kwargs)


dist.TCPStore = _NoLibuvTCPStore
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend  # noqa: E402

c10d_rendezvous_backend.TCPStore = _NoLibuvTCPStore
from torch.distributed.run import main  # noqa: E402  (after the patch, on purpose)

if __name__ == "__main__":
    sys.exit(main())
