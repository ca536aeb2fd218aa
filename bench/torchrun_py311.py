"""Runs Debian's torchrun (PyTorch 1.13 on Python 3.11) with one parser bug repaired.

On Python 3.11, torch 1.13's Std.from_str("0") returns None (IntFlag iteration skips the
zero member), so torchrun crashes with its default --redirects 0 / --tee 0. This wrapper
replaces only that parser and then calls torch.distributed.run.main() unchanged, so the
benchmark measures torchrun with its real defaults (no redirection). The alternative,
`-r 1 -t 2`, would make torchrun write and tail per-rank log files, which ddprun and the
shell floor do not do; that would not be a like-for-like comparison.
"""
import sys

from torch.distributed.elastic.multiprocessing import api

_original = api.Std.from_str.__func__


def _from_str(cls, vm):
    parsed = _original(cls, vm)  # still raises ValueError on malformed input
    if isinstance(parsed, dict):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    return cls(int(vm))


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402  (after the patch, on purpose)

if __name__ == "__main__":
    sys.exit(main())
