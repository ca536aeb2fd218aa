#!/usr/bin/env python3
"""rdzv_procs.py: N ddprun agent processes on this machine, one worker each, forming one
c10d rendezvous as users start them (issue 24's test): prints, per run, the seconds from
the last agent's start until every worker ran, the rounds the agents saw, the exit codes
and the load. Standard library only.

    bench/rdzv_procs.py [--ddprun build/rel/launcher/ddprun] [--runs 5] 256 512 1024

Each agent runs `--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT --nnodes N
--nproc-per-node 1 --local-addr 127.0.x.y --no-python /bin/sh -c 'touch DIR/w.$RANK'`,
in a session of its own, its output in DIR/agent.<i>.log; every process group is killed
at the end of a run, whatever happened.
"""
import argparse
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench import free_port, wait_for  # noqa: E402  (the one home of these helpers)


def run(ddprun, n, timeout, keep):
    d = Path(tempfile.mkdtemp(prefix=f"rdzv{n}-"))
    port = free_port()
    load = os.getloadavg()[0]
    procs = []
    logs = []
    try:
        for i in range(n):
            argv = [ddprun, "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                    "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-id", f"procs{port}",
                    "--local-addr", f"127.0.{i // 250}.{i % 250 + 1}", "--no-python",
                    "/bin/sh", "-c", f'touch "{d}/w.$RANK"']
            log = open(d / f"agent.{i}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        t_last = time.perf_counter()
        ran = wait_for(lambda: len(list(d.glob("w.*"))) >= n, timeout, 0.01)
        took = time.perf_counter() - t_last
        workers = len(list(d.glob("w.*")))
        wait_for(lambda: all(p.poll() is not None for p in procs), 120, 0.05)
        codes = {}
        for p in procs:
            rc = p.poll()
            codes[rc] = codes.get(rc, 0) + 1
        rounds = {0}  # the agents log at WARNING: only a new round leaves a line
        restarts = 0
        for i in range(n):
            text = (d / f"agent.{i}.log").read_text(errors="replace")
            started = re.findall(r"starting round (\d+)", text)
            rounds.update(int(r) for r in started)
            rounds.update(int(r) + 1 for r in re.findall(r"round (\d+): .*a new round is needed",
                                                         text))
            restarts += len(started)
        return {"n": n, "s": round(took, 2) if ran else None, "workers": workers,
                "rounds": sorted(rounds), "starting_round_lines": restarts,
                "exit_codes": codes, "load1": round(load, 1), "dir": str(d)}
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for log in logs:
            log.close()
        if not keep:
            subprocess.run(["rm", "-rf", str(d)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="+", type=int)
    ap.add_argument("--ddprun", default=str(ROOT / "build/rel/launcher/ddprun"))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--keep", action="store_true", help="keep the agents' logs")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for n in a.sizes:
        for _ in range(a.runs):
            r = run(a.ddprun, n, a.timeout, a.keep)
            ok = r["s"] is not None and r["exit_codes"] == {0: n} and r["rounds"] == [0]
            print(f"N={n}: {'OK' if ok else 'FAILED'} workers ran {r['s']} s after the last "
                  f"agent's start ({r['workers']}/{n}); rounds {r['rounds']}, "
                  f"'starting round' lines {r['starting_round_lines']}; exit codes "
                  f"{r['exit_codes']}; load {r['load1']} at start" +
                  (f"; logs {r['dir']}" if a.keep else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
