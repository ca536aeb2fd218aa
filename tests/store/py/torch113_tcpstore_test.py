"""Real PyTorch 1.13 TCPStore clients (legacy dialect) against ddprun-store: every
operation the 1.13 client has, blocking waits released by another process, timeouts,
init/ counting, and 8 processes x 200 operations with a final cross-check.
Usage: torch113_tcpstore_test.py PATH/TO/ddprun-store   (exit 77 = skipped: no torch)"""
import re
import subprocess
import sys
import time
from datetime import timedelta

from store_proc import StoreProcess, cli, expect, fork, raises, require_torch, watchdog

WORKERS = 8
OPS = 200


def client(port, **kwargs):
    import torch.distributed as dist
    kwargs.setdefault("timeout", timedelta(seconds=60))
    return dist.TCPStore("127.0.0.1", port, is_master=False, **kwargs)


def worker(port, rank):
    """One of the concurrent processes: OPS mixed operations, then a done marker."""
    s = client(port)
    s.wait(["start"])  # after the single-client checks, which count keys
    for i in range(OPS):
        s.set(f"w{rank}/{i}", f"{rank}:{i}")
        s.add("total", 1)
        if i % 20 == 0:
            # Blocks until the neighbour process got this far.
            other = (rank + 1) % WORKERS
            expect(s.get(f"w{other}/{i}") == f"{other}:{i}".encode(), "neighbour value")
        if i % 50 == 0:
            s.compare_set(f"cs{rank}", "", "x")
            s.set(f"tmp{rank}/{i}", "t")
            expect(s.delete_key(f"tmp{rank}/{i}"), "delete_key of a key just set")
    s.set(f"done/{rank}", "1")


def late_setter(port):
    """Another process: once told to go, sets "wake" a little later."""
    s = client(port)
    s.wait(["go"])
    time.sleep(0.5)
    s.set("wake", "from-other")


def single_client_ops(binary, port, setter):
    s = client(port)
    s.set("k", "v")
    expect(s.get("k") == b"v", "get")
    s.set("bin", b"\x00\xff\x01")
    expect(s.get("bin") == b"\x00\xff\x01", "binary value")
    s.set("k", "v2")
    expect(s.get("k") == b"v2", "overwrite")

    expect(s.add("cnt", 5) == 5, "add")
    expect(s.add("cnt", -7) == -2, "add negative")
    expect(s.get("cnt") == b"-2", "add stores ASCII decimal")

    keys_before = s.num_keys()
    expect(s.compare_set("cs", "expected", "new") == b"expected", "compare_set missing key")
    expect(s.num_keys() == keys_before, "compare_set on a missing key stores nothing")
    expect(s.compare_set("cs", "", "first") == b"first", "compare_set creates")
    expect(s.compare_set("cs", "nope", "x") == b"first", "compare_set mismatch")
    expect(s.compare_set("cs", "first", "second") == b"second", "compare_set match")
    expect(s.num_keys() == keys_before + 1, "num_keys after compare_set")

    s.wait(["k", "cnt"])
    s.wait(["k"], timedelta(seconds=5))
    expect(s.delete_key("cs") is True, "delete existing")
    expect(s.delete_key("cs") is False, "delete missing")
    expect(s.num_keys() == keys_before, "num_keys after delete")

    # Keys carry the 1.13 client's "/" prefix on the wire; the CLI shows them as stored.
    rc, out, _ = cli(binary, "get", f"--addr=127.0.0.1:{port}", "/k")
    expect(rc == 0 and out == "v2\n", f"CLI sees /k: {out!r}")

    # A wait that times out (the 1.13 client gives up silently; use a fresh client after).
    t = client(port)
    start = time.monotonic()
    raises(lambda: t.wait(["never"], timedelta(milliseconds=500)), "wait timeout")
    expect(time.monotonic() - start >= 0.4, "wait returned before its timeout")
    t.set_timeout(timedelta(milliseconds=300))
    raises(lambda: t.get("missing"), "get after set_timeout")

    # A wait released later by another process.
    w = client(port)
    w.set("go", "1")
    w.wait(["wake"], timedelta(seconds=60))
    expect(w.get("wake") == b"from-other", "value from the other process")
    setter.join(timeout=60)
    expect(setter.exitcode == 0, "setter process")


def init_counting(binary, port):
    # Each client constructed with a world size ADDs 1 to "init/" (sent without "/").
    stores = [client(port, world_size=3) for _ in range(3)]
    rc, out, _ = cli(binary, "get", f"--addr=127.0.0.1:{port}", "init/")
    expect(rc == 0 and out == "3\n", f"init/ after 3 clients: {out!r}")
    del stores


def concurrent(binary, port, procs):
    client(port).set("start", "1")
    for p in procs:
        p.join(timeout=180)
        expect(p.exitcode == 0, f"worker process failed: {p.exitcode}")
    s = client(port)
    s.wait([f"done/{r}" for r in range(WORKERS)], timedelta(seconds=10))
    expect(s.add("total", 0) == WORKERS * OPS, "total of every worker's adds")
    for r in range(WORKERS):
        expect(s.get(f"cs{r}") == b"x", "compare_set per worker")
        for i in range(OPS):
            expect(s.get(f"w{r}/{i}") == f"{r}:{i}".encode(), f"w{r}/{i}")
    keys = cli(binary, "keys", f"--addr=127.0.0.1:{port}")[1].split()
    expect(len([k for k in keys if re.match(r"/w\d+/", k)]) == WORKERS * OPS, "worker keys")
    expect(not [k for k in keys if k.startswith("/tmp")], "deleted keys are gone")


def main(binary):
    require_torch()
    import torch.distributed  # noqa: F401  (imported once; forked workers share it)
    watchdog(200)
    with StoreProcess(binary) as store:
        # Forked before this process creates any TCPStore (see store_proc.fork).
        setter = fork(late_setter, store.port)
        workers = [fork(worker, store.port, r) for r in range(WORKERS)]
        single_client_ops(binary, store.port, setter)
        init_counting(binary, store.port)
        concurrent(binary, store.port, workers)
        expect(store.stop() == 0, "ddprun-store exit status")
    print("torch113_tcpstore_test: ok")


if __name__ == "__main__":
    main(sys.argv[1])
