#!/usr/bin/env python3
"""Regenerates tests/fuzz/corpus/: seed connection streams for the store_core fuzzer.

Each file is one connection's bytes. Legacy seeds follow the PyTorch 1.13 captures
(tcpstore-protocol.md A.4, A.10); modern seeds open with VALIDATE + PING like a 2.2+
client. A few seeds are deliberately bad (wrong magic, oversized lengths, unknown
commands) so the error paths stay covered. Run from anywhere: python3 make_corpus.py

The legacy_real_1_13_* files are not generated here: they are the client-to-server bytes
of the two main connections of a real 2-rank PyTorch 1.13 gloo job (init_process_group,
all_reduce, set/add/compare_set/delete_key, barrier), recorded by a forwarding proxy in
front of ddprun-store. This script leaves them alone.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")

LEGACY = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6, WATCH_KEY=7,
              DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12)
MODERN = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6, GETNUMKEYS=7,
              DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12, PING=13,
              QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16, LIST_KEYS=17, BARRIER=18)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def i64(v):
    return struct.pack("<q", v)


class Client:
    def __init__(self, table):
        self.t = table
        self.out = b""

    def cmd(self, name, *parts):
        self.out += bytes([self.t[name]]) + b"".join(parts)
        return self

    def set(self, k, v): return self.cmd("SET", s(k), s(v))
    def get(self, k): return self.cmd("GET", s(k))
    def add(self, k, d): return self.cmd("ADD", s(k), i64(d))
    def cas(self, k, e, d): return self.cmd("COMPARE_SET", s(k), s(e), s(d))
    def keys(self, name, ks): return self.cmd(name, struct.pack("<Q", len(ks)), *map(s, ks))
    def wait(self, *ks): return self.keys("WAIT", ks)
    def check(self, *ks): return self.keys("CHECK", ks)
    def mget(self, *ks): return self.keys("MULTI_GET", ks)
    def mset(self, kv):
        return self.cmd("MULTI_SET", i64(len(kv)), *[s(k) + s(v) for k, v in kv])
    def delete(self, k): return self.cmd("DELETE_KEY", s(k))
    def append(self, k, v): return self.cmd("APPEND", s(k), s(v))


def legacy():
    return Client(LEGACY)


def modern(pid=4242):
    c = Client(MODERN)
    c.out = bytes([0]) + struct.pack("<I", 0x3C85F7CE) + bytes([13]) + struct.pack("<I", pid)
    return c


def seeds():
    # The 1.13 capture of set/wait/get and the other operations, in order.
    yield "legacy_capture", (legacy().set("/k1", "hello").wait("/k1").get("/k1")
                             .add("/cnt", 5).add("/cnt", -2).cas("/c1", "", "new")
                             .cmd("GETNUMKEYS").delete("/k1").delete("/k1")
                             .wait("/cnt", "/c1").out)
    # A worker's init_process_group in agent-store mode (B.1), as seen on the wire.
    w = legacy().add("init/", 1)
    w.set("//worker/attempt_0/default_pg/0/0/rank_0", "host").wait(
        "//worker/attempt_0/default_pg/0/0/rank_1")
    w.get("//worker/attempt_0/default_pg/0/0/rank_1")
    w.add("//worker/attempt_0/default_pg/store_based_barrier_key:1", 1)
    w.add("//worker/attempt_0/default_pg/store_based_barrier_key:1", 0)
    yield "legacy_init_process_group", w.out
    yield "legacy_watch", (legacy().cmd("WATCH_KEY", s("/w")).set("/w", "a").append("/w", "b")
                           .cas("/w", "ab", "c").delete("/w").add("/w", 3).out)
    yield "legacy_wait_dupes_cancel", (legacy().wait("/x", "/x", "/y").set("/x", "1")
                                       .wait("/z").cmd("CANCEL_WAIT").set("/y", "2")
                                       .set("/z", "3").check("/x", "/y", "/q").out)
    yield "legacy_2_0_multi", (legacy().mset([("/a", "1"), ("/b", "")]).mget("/a", "/b", "/c")
                               .append("/a", "23").get("/a").out)
    yield "legacy_add_non_number", legacy().set("/n", "abc").add("/n", 1).get("/n").out
    yield "legacy_partial_tail", legacy().set("/k", "v").out + bytes([0]) + struct.pack("<Q", 3)
    yield "legacy_huge_length_is_1_13_reading_2x", bytes([0, 0xce, 0xf7, 0x85, 0x3c, 13, 1, 0, 0, 0])
    yield "legacy_unknown_command", legacy().set("/k", "v").out + bytes([13, 0, 0, 0, 0])

    yield "modern_handshake_only", modern().out
    yield "modern_init_and_get", (modern().add("init/", 1).set("/k", "v").wait("/k").get("/k")
                                  .get("/missing").check().cmd("GETNUMKEYS").out)
    yield "modern_wait_timeout_cancel", (modern().wait("/never").cmd("CANCEL_WAIT")
                                         .cmd("CANCEL_WAIT").set("/never", "now").out)
    yield "modern_barrier", (modern().cmd("BARRIER", s("/b"), i64(3))
                             .cmd("BARRIER", s("/b"), i64(3)).wait("/b")
                             .cmd("BARRIER", s("/b"), i64(3)).cmd("BARRIER", s("/b"), i64(3)).out)
    yield "modern_queues", (modern().wait("/q").cmd("QUEUE_PUSH", s("/q"), s("job1"))
                            .cmd("QUEUE_PUSH", s("/q"), s("job2")).cmd("QUEUE_LEN", s("/q"))
                            .cmd("QUEUE_POP", s("/q")).cmd("QUEUE_POP", s("/q"))
                            .cmd("QUEUE_POP", s("/q")).check("/q").out)
    yield "modern_list_delete", (modern().mset([("/a", "1"), ("/b", "2"), ("c", "3")])
                                 .cmd("LIST_KEYS").delete("/a").cmd("LIST_KEYS")
                                 .cas("/b", "2", "3").cas("/zz", "x", "y").out)
    yield "modern_add_overflow", (modern().add("/c", 9223372036854775807).add("/c", 1)
                                  .cmd("BARRIER", s("/c"), i64(2)).out)
    yield "modern_wrong_magic", bytes([0]) + struct.pack("<I", 0x3C85F7CE) + bytes([0]) + \
        struct.pack("<I", 0x12345678)
    yield "modern_too_many_keys", modern().out + bytes([11]) + i64(200000)
    # Issue 14: one large value named many times in a MULTI_GET (a reply far larger than
    # the request, streamed by the server) and a first VALIDATE with a wrong magic.
    yield "modern_multi_get_amplified", (modern().set("/v", "v" * 60000).mget(*["/v"] * 64)
                                         .mget(*["/v"] * 8).cmd("PING", struct.pack("<I", 7))
                                         .out)
    yield "modern_wrong_first_magic", bytes([0]) + struct.pack("<I", 0xEFBEADDE)
    yield "modern_barrier_zero", modern().cmd("BARRIER", s("/b"), i64(0)).out
    yield "modern_value_too_long", modern().out + bytes([1]) + s("/k") + struct.pack("<Q", 9 << 20)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(list(seeds()))} seeds to {OUT}")


if __name__ == "__main__":
    main()
