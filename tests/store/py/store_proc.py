"""Helpers for the ddprun-store black-box tests: start `ddprun-store serve` on an
OS-chosen loopback port, stop it on exit, a watchdog so that no test can hang, and the
checks expect() and raises() (tcpstore_api_client.py keeps its own copy: it runs under
any PyTorch, needing nothing from this checkout).

Every process started here gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the test
even when ctest kills the test with SIGKILL."""
import ctypes
import multiprocessing
import os
import re
import select
import signal
import subprocess
import sys
import threading

SKIP = 77  # ctest SKIP_RETURN_CODE
_children = []


def expect(cond, what):
    """Fails the test with `what` unless `cond` holds."""
    if not cond:
        raise AssertionError(what)


def raises(fn, what):
    """The text of the RuntimeError that fn() must raise (DistStoreError in 2.x is one)."""
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    raise AssertionError(f"{what}: no error raised")


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(argv, **kwargs):
    """subprocess.Popen that dies with this process and is killed by the watchdog."""
    proc = subprocess.Popen(argv, preexec_fn=_die_with_parent, **kwargs)
    _children.append(proc)
    return proc


def _forked_main(target, args):
    _die_with_parent()
    target(*args)


def fork(target, *args):
    """Runs target(*args) in a forked child (which shares the parent's imports, so a
    torch import is not paid again). Fork before the parent creates any TCPStore: its
    threads would not survive a fork."""
    proc = multiprocessing.get_context("fork").Process(target=_forked_main,
                                                        args=(target, args))
    proc.start()
    _children.append(proc)
    return proc


def kill_children():
    for proc in _children:
        if isinstance(proc, subprocess.Popen):
            if proc.poll() is None:
                proc.kill()
        elif proc.is_alive():
            proc.kill()


def watchdog(seconds):
    """After `seconds`, kill every child and exit 1: a hang becomes a failure."""
    def fire():
        print(f"FAIL: test did not finish within {seconds} s; killing everything",
              flush=True)
        kill_children()
        os._exit(1)
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def require_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:  # any import failure means "no usable torch here"
        print(f"SKIP: cannot import torch with {sys.executable}: {e}", flush=True)
        sys.exit(SKIP)


class StoreProcess:
    """`with StoreProcess(binary) as store:` runs ddprun-store; store.port is its port."""

    def __init__(self, binary, *extra_args):
        self.argv = [binary, "serve", "--host", "127.0.0.1", "--port", "0", *extra_args]
        self.proc = None
        self.port = None

    def __enter__(self):
        self.proc = spawn(self.argv, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"ddprun-store listening on 127\.0\.0\.1:(\d+)\n", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"ddprun-store did not report its port (got {line!r})")
        self.port = int(m.group(1))
        return self

    def stop(self, sig=signal.SIGTERM):
        """Signals the store and returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise RuntimeError("ddprun-store did not exit within 20 s of a signal")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return False


def cli(binary, *args, timeout=30):
    """Runs a ddprun-store inspection command; returns (exit code, stdout, stderr)."""
    proc = spawn([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err
