#!/usr/bin/env python3
"""bench/netfault.py: how long a silent network fault takes to be named and to end each
node's part of the job, ddprun beside the real torchrun 2.14, at default settings (issue
33; docs/benchmarks.md, "Silent network faults").

    bench/netfault.py [--ddprun build/bench/launcher/ddprun] [--limit 240] [--only ddprun]

Three hosts (network namespaces, tests/support/netns.py), a c10d job `--nnodes 2:3` with
default settings (keep_alive_interval 5 s x keep_alive_max_attempt 3, join_timeout 600 s;
only is_host and --local-addr given, which torchrun cannot tell in a namespace),
one gloo worker per node (netfault_worker.py: an all_reduce every 0.1 s for 300 s). Once
every worker runs, one fault (silent nft drops, tests/support/netns.py): the worker node
2 isolated for good, or the store's host (node 0) isolated. For each node: the time from
the fault to its launcher's first line after it (and that line), and to its exit, or
"> limit" when it was still running then (all are killed at the limit). torchrun 2.14
runs through scripts/python-torch214 and bench/torchrun26.py (its non-libuv TCPStore);
its column is skipped without the sid chroot. Root only (namespaces, nft).
"""
import argparse
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import blackbox  # noqa: E402
from netns import Netns  # noqa: E402

WORKER = os.path.join(ROOT, "bench", "netfault_worker.py")
PY214 = os.path.join(ROOT, "scripts", "python-torch214")
SCENARIOS = {"worker node isolated": 2, "store host isolated": 0}


def launcher_argv(name, ddprun):
    if name == "ddprun":
        return [ddprun]
    return [PY214, os.path.join(ROOT, "bench", "torchrun26.py")]


def run(name, ddprun, victim, limit):
    ws = blackbox.Workspace(ddprun, "ddprun_netfault_")
    net = Netns(3)
    try:
        procs, logs = [], []
        for i in range(3):
            env = blackbox.job_environment(TMPDIR=ws.dir, GLOO_SOCKET_IFNAME="mn0",
                                           USE_LIBUV="0", NF_OUT=ws.dir)
            if name == "ddprun":
                env["PYTHON_EXEC"] = "/usr/bin/python3"
            else:
                env.pop("PYTHON_EXEC", None)
            log = os.path.join(ws.dir, f"node{i}.log")
            logs.append(log)
            argv = [*net.prefix(i), *launcher_argv(name, ddprun), "--nnodes=2:3",
                    "--nproc-per-node=1", "--rdzv-id=netfault", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={Netns.addr(0)}:29400", f"--local-addr={Netns.addr(i)}",
                    # torchrun does not see 10.213.0.1 as node 0's own: say who hosts.
                    f"--rdzv-conf=is_host={int(i == 0)}", WORKER]
            procs.append(ws.start_process(argv, env, log=log, new_session=True))
        ready = lambda: all(os.path.exists(os.path.join(ws.dir, f"running{i}")) for i in range(3))
        deadline = time.monotonic() + 120
        while not ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                return None, "the job did not start:\n" + "\n".join(
                    blackbox.read_text(f)[:2500] for f in logs)
            time.sleep(0.1)
        time.sleep(2)
        seen = [len(blackbox.read_text(f)) for f in logs]
        t0 = time.monotonic()
        net.isolate(victim)
        first = [None] * 3
        ended = [None] * 3
        while time.monotonic() - t0 < limit and None in ended:
            now = time.monotonic() - t0
            for i in range(3):
                text = blackbox.read_text(logs[i])[seen[i]:]
                lines = [l for l in text.splitlines() if l.strip()]
                if first[i] is None and lines:
                    first[i] = (now, lines[0][:160])
                if ended[i] is None and procs[i].poll() is not None:
                    ended[i] = (now, procs[i].returncode)
            time.sleep(0.1)
        return [(first[i], ended[i]) for i in range(3)], ""
    finally:
        ws.close()
        net.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ddprun", default=os.path.join(ROOT, "build", "bench", "launcher", "ddprun"))
    ap.add_argument("--limit", type=float, default=240)
    ap.add_argument("--only", choices=["ddprun", "torchrun"])
    a = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("nft") is None:
        print("bench/netfault.py: needs root and nft (Debian's nftables)")
        return 2
    launchers = ["ddprun", "torchrun"]
    if a.only:
        launchers = [a.only]
    if "torchrun" in launchers and not os.path.isdir("/var/cache/ddprun/sid"):
        print("no sid chroot (scripts/torch-chroot sid): torchrun 2.14 skipped")
        launchers.remove("torchrun")
    print(f"load at start: {os.getloadavg()[0]:.2f} (1 min)")
    print("| fault | launcher | node | first line after the fault | exit |")
    print("|---|---|---|---|---|")
    for scenario, victim in SCENARIOS.items():
        for name in launchers:
            rows, why = run(name, os.path.abspath(a.ddprun), victim, a.limit)
            if rows is None:
                print(f"| {scenario} | {name} | - | {why.splitlines()[0] if why else ''} | - |")
                print(why, file=sys.stderr)
                continue
            for i, (first, ended) in enumerate(rows):
                role = "store host" if i == 0 else "isolated" if i == victim else "worker node"
                f = f"{first[0]:.1f} s: `{first[1]}`" if first else f"none in {a.limit:.0f} s"
                e = f"{ended[0]:.1f} s (exit {ended[1]})" if ended else f"> {a.limit:.0f} s"
                print(f"| {scenario} | {name} | {i} ({role}) | {f} | {e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
