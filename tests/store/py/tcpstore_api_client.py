"""The client half of tcpstore_api_test.py; runs under the PyTorch being tested (1.13 on
the host, 2.6 or 2.14 in their chroots) and needs nothing from this checkout.
Usage: tcpstore_api_client.py PORT. Exit 0 = every check passed, 77 = no torch here,
1 = a check failed (the message says which). Prints the methods it exercised."""
import sys
import threading
import time
from datetime import timedelta

SKIP = 77
used = []


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def raises(fn, what):
    try:
        fn()
    except RuntimeError as e:  # DistStoreError (2.x) is a RuntimeError too
        return str(e)
    raise AssertionError(f"{what}: no error raised")


def main(port):
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:
        print(f"SKIP: cannot import torch with {sys.executable}: {e}")
        return SKIP
    major = int(torch.__version__.split(".")[0])

    def client(**kwargs):
        kwargs.setdefault("timeout", timedelta(seconds=60))
        if major >= 2:
            kwargs.setdefault("use_libuv", False)  # a client: the backend only matters to
        return dist.TCPStore("127.0.0.1", port, is_master=False, **kwargs)  # a server

    def exercise(s, label):
        s.set("k", "v")
        expect(s.get("k") == b"v", f"{label}: get")
        s.set("bin", b"\x00\xff\x01")
        expect(s.get("bin") == b"\x00\xff\x01", f"{label}: binary value")
        expect(s.add("cnt", 5) == 5 and s.add("cnt", -7) == -2, f"{label}: add")
        expect(s.get("cnt") == b"-2", f"{label}: add stores ASCII decimal")
        n = s.num_keys()
        expect(s.compare_set("cs", "expected", "new") == b"expected",
               f"{label}: compare_set on a missing key")
        expect(s.compare_set("cs", "", "first") == b"first", f"{label}: compare_set creates")
        expect(s.compare_set("cs", "nope", "x") == b"first", f"{label}: compare_set mismatch")
        expect(s.compare_set("cs", "first", "2nd") == b"2nd", f"{label}: compare_set match")
        expect(s.num_keys() == n + 1, f"{label}: num_keys {s.num_keys()} != {n + 1}")
        s.wait(["k", "cnt"])
        s.wait(["k"], timedelta(seconds=5))
        expect(s.delete_key("cs") is True and s.delete_key("cs") is False,
               f"{label}: delete_key")
        expect(s.num_keys() == n, f"{label}: num_keys after delete")
        used.extend(["set", "get", "add", "compare_set", "num_keys", "wait", "delete_key"])
        if major >= 2:
            expect(s.check(["k", "cnt"]) is True, f"{label}: check of present keys")
            expect(s.check(["k", "absent"]) is False, f"{label}: check with a missing key")
            s.multi_set(["m1", "m2"], ["a", b"\x00b"])
            expect(s.multi_get(["m2", "m1", "k"]) == [b"\x00b", b"a", b"v"],
                   f"{label}: multi_get")
            s.append("ap", "x")
            s.append("ap", b"yz")
            expect(s.get("ap") == b"xyz", f"{label}: append")
            used.extend(["check", "multi_set", "multi_get", "append"])

    s = client()
    if major >= 2:
        expect(s.has_extended_api() is True, "has_extended_api")
        used.append("has_extended_api")
    exercise(s, "TCPStore")
    p = dist.PrefixStore("pre", s)
    exercise(p, "PrefixStore")
    expect(p.get("k") == b"v" and s.get("pre/k") == b"v", "PrefixStore keys live under pre/")
    used.append("PrefixStore")

    # A wait that times out, then a get on a fresh client with a short timeout.
    t = client()
    start = time.monotonic()
    raises(lambda: t.wait(["never"], timedelta(milliseconds=500)), "wait timeout")
    expect(time.monotonic() - start >= 0.4, "wait returned before its timeout")
    t2 = client()
    t2.set_timeout(timedelta(milliseconds=300))
    raises(lambda: t2.get("missing"), "get after set_timeout")
    used.append("set_timeout")

    # A wait released by another connection (a thread with its own client).
    w = client()
    setter = client()
    thread = threading.Thread(target=lambda: (time.sleep(0.5), setter.set("wake", "later")))
    thread.start()
    w.wait(["wake"], timedelta(seconds=60))
    thread.join()
    expect(w.get("wake") == b"later", "value set by the other connection")

    # Constructing with a world size counts the client in (and waits for the others).
    many = [client(world_size=3) for _ in range(3)]
    del many
    s.set("done", "1")
    print(f"torch {torch.__version__}: ok: {' '.join(sorted(set(used)))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
