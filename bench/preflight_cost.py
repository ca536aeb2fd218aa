#!/usr/bin/env python3
"""preflight_cost.py: what --preflight adds to a job's start (issue 34). N ddprun agents on
this machine (loopback addresses 127.0.0.1..N, c10d, one CPU worker each running the
multinode suite's worker for one step), started together with and without --preflight,
the two kinds of run interleaved; prints per run the seconds until every agent exited 0
and, with the check, its own time as the table's header line says ("passed on N node(s)
in X s"); then the medians and the difference. Standard library only.

    bench/preflight_cost.py [--ddprun build/bench/launcher/ddprun] [--python /usr/bin/python3]
                            [--runs 3] 4 8
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench import free_port  # noqa: E402  (the one home of these helpers)

WORKER = ROOT / "tests" / "multinode" / "workers" / "mn_worker.py"


def one_run(ddprun, python, n, preflight):
    """(seconds until all exited, the check's own seconds or None); raises on a failure."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ddprun_pf_bench_") as d:
        env = dict(os.environ, PYTHON_EXEC=python, TMPDIR=d, MN_OUT=d)
        procs = []
        start = time.monotonic()
        for i in range(n):
            argv = [ddprun, f"--nnodes={n}", "--nproc-per-node=1", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint=127.0.0.1:{port}", f"--local-addr=127.0.0.{i + 1}",
                    "--rdzv-id=pf_bench", *(["--preflight"] if preflight else []),
                    str(WORKER), "--steps", "1"]
            log = open(os.path.join(d, f"agent.{i}.log"), "w")
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            log.close()
        rcs = [p.wait(timeout=300) for p in procs]
        took = time.monotonic() - start
        text = "".join(Path(d, f"agent.{i}.log").read_text() for i in range(n))
        if any(rcs):
            raise RuntimeError(f"exit codes {rcs}:\n{text[-3000:]}")
        m = re.search(r"pre-flight check passed on \d+ node\(s\) in ([0-9.]+) s", text)
        return took, float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddprun", default=str(ROOT / "build" / "bench" / "launcher" / "ddprun"))
    ap.add_argument("--python", default=os.environ.get("PYTHON_EXEC", "/usr/bin/python3"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("nodes", type=int, nargs="+")
    a = ap.parse_args()
    for n in a.nodes:
        plain, checked, check_own = [], [], []
        for r in range(a.runs):
            for preflight in (False, True):
                load = os.getloadavg()[0]
                took, own = one_run(a.ddprun, a.python, n, preflight)
                (checked if preflight else plain).append(took)
                if own is not None:
                    check_own.append(own)
                print(f"{n} nodes run {r + 1} {'--preflight' if preflight else 'plain      '}: "
                      f"{took:.2f} s{f' (check {own:.1f} s)' if own is not None else ''}, "
                      f"load {load:.1f}", flush=True)
        mp, mc = statistics.median(plain), statistics.median(checked)
        print(f"{n} nodes: median {mp:.2f} s plain, {mc:.2f} s with --preflight "
              f"(+{mc - mp:.2f} s, x{mc / mp:.2f}); the check itself: median "
              f"{statistics.median(check_own):.2f} s")


if __name__ == "__main__":
    main()
