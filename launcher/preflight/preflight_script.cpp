// preflight_script.cpp: the pre-flight check's Python program (see preflight_script.h).
#include "launcher/preflight/preflight_script.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace ddprun::launcher::preflight {
namespace {

// Environment (set by preflight.cpp): DDPRUN_PREFLIGHT_NODE / _NODES (this node's group
// rank, the round's node count), _ADDR / _PORT (the workers' store), _HOST_STORE ("1": no
// agent hosts that store, node 0's check does), _BYTES (the collective's payload),
// _TIMEOUT (seconds, every collective's bound).
constexpr const char* kScript =
    R"PY(# Written by ddprun for --preflight (launcher/preflight/preflight_script.cpp).
# Checks what the job's workers will use and writes one JSON object to sys.argv[1]:
# {"python", "checks": [{"name", "ok", "seconds", "detail" | "error"}], "links": {...}},
# first the local checks ("local_done"), then, when ddprun says "go" on stdin, the collective.
import json
import os
import sys
import time

result = {"python": sys.executable, "checks": [], "links": {}}
env = os.environ


def save():
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, sys.argv[1])


def check(name, fn):
    start = time.monotonic()
    entry = {"name": name}
    try:
        entry["detail"] = str(fn() or "")
        entry["ok"] = True
    except Exception as e:  # noqa: BLE001 - every failure is a finding
        entry["ok"] = False
        entry["error"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
    entry["seconds"] = round(time.monotonic() - start, 4)
    result["checks"].append(entry)
    save()
    return entry["ok"]


torch = None


def import_torch():
    global torch
    import torch as t
    torch = t
    return t.__version__


def devices():
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return ["cuda:%d" % i for i in range(torch.cuda.device_count())]
    return ["cpu"]


def device_check(name):
    def run():
        dev = torch.device(name)
        n = 2048 if dev.type == "cuda" else 384
        # 0.5 * 0.5 * n: exact in float32, so a device that computes wrong is seen.
        a = torch.full((n, n), 0.5, device=dev)
        for _ in range(12):
            c = a @ a
        touch = (1 << 30) if dev.type == "cuda" else (64 << 20)
        if dev.type == "cuda":
            free = torch.cuda.mem_get_info(dev)[0]
            touch = min(touch, free // 2)
        m = torch.empty(touch, dtype=torch.uint8, device=dev).fill_(7)
        total = int(m[:: 4096].sum().item())
        want = 7 * ((touch + 4095) // 4096)
        got = float(c[0, 0].item())
        if got != 0.25 * n:
            raise RuntimeError("matmul gave %r instead of %r" % (got, 0.25 * n))
        if total != want:
            raise RuntimeError("memory touch read %d instead of %d" % (total, want))
        if dev.type == "cuda":
            return torch.cuda.get_device_name(dev)
        return "%d threads" % torch.get_num_threads()
    return run


def collective():
    import datetime
    import torch.distributed as dist
    node, nodes = int(env["DDPRUN_PREFLIGHT_NODE"]), int(env["DDPRUN_PREFLIGHT_NODES"])
    timeout = datetime.timedelta(seconds=float(env["DDPRUN_PREFLIGHT_TIMEOUT"]))
    args = (env["DDPRUN_PREFLIGHT_ADDR"], int(env["DDPRUN_PREFLIGHT_PORT"]), nodes,
            env.get("DDPRUN_PREFLIGHT_HOST_STORE") == "1" and node == 0, timeout)
    try:
        # As the workers' env:// reads it (torch >= 2.2; a torch built without libuv
        # refuses the default).
        store = dist.TCPStore(*args, use_libuv=env.get("USE_LIBUV", "1") == "1")
    except TypeError:  # torch < 2.2: no such argument
        store = dist.TCPStore(*args)
    store = dist.PrefixStore("ddprun_preflight/", store)
    gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if gpu:
        torch.cuda.set_device(0)
    dev = torch.device("cuda:0" if gpu else "cpu")
    dist.init_process_group("nccl" if gpu else "gloo", store=store, rank=node,
                            world_size=nodes, timeout=timeout)
    try:
        count = max(1, int(env["DDPRUN_PREFLIGHT_BYTES"]) // 4)
        t = torch.ones(count, device=dev)
        dist.all_reduce(t)
        if float(t[0].item()) != nodes or float(t[-1].item()) != nodes:
            raise RuntimeError("all_reduce gave %r instead of %r" % (t[0].item(), nodes))
        # Each link with a ring neighbour, one direction at a time, timed where it lands.
        out, into = torch.ones(count, device=dev), torch.zeros(count, device=dev)
        passes = [((node + 1) % nodes, (node - 1) % nodes)]
        if nodes > 2:
            passes.append(((node - 1) % nodes, (node + 1) % nodes))
        for to, frm in passes:
            dist.all_reduce(torch.ones(1, device=dev))
            start = time.monotonic()
            req = dist.isend(out, to)
            dist.recv(into, frm)
            if gpu:
                torch.cuda.synchronize()
            result["links"][str(frm)] = round(time.monotonic() - start, 4)
            req.wait()
        return "%s, %d bytes" % (dist.get_backend(), count * 4)
    finally:
        dist.destroy_process_group()


if check("import torch", import_torch):
    for d in devices():
        check(d, device_check(d))
# ddprun answers "go" once every node's local checks passed (else "skip").
result["local_done"] = True
save()
if sys.stdin.readline().strip() == "go":
    check("collective", collective)
)PY";

}  // namespace

const char* script_text() { return kScript; }

void write_script(const std::string& path) {
  std::ofstream f(path, std::ios::trunc);
  f << kScript;
  f.close();
  if (!f) {
    throw std::runtime_error("cannot write the pre-flight check to " + path + ": " +
                             std::strerror(errno));
  }
}

}  // namespace ddprun::launcher::preflight
