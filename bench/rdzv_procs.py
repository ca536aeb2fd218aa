#!/usr/bin/env python3
"""rdzv_procs.py: N ddprun agent processes on this machine, one worker each, forming one
c10d rendezvous as users start them (issues 24 and 35): prints, per run, the seconds from
the last agent's start until every worker ran, the rounds the agents saw, the exit codes,
the load, and the agents' error lines counted by message; then how many runs formed.
Standard library only.

    bench/rdzv_procs.py [--ddprun build/rel/launcher/ddprun] [--runs 10] [--per-addr 4]
                        [--hogs 2] [--lock /tmp/bigrun.lock] 256 1024

Each agent runs `--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT --nnodes N
--nproc-per-node 1 --local-addr 127.0.x.y --no-python /bin/sh -c 'touch DIR/w.$RANK'`,
in a session of its own, its output in DIR/agent.<i>.log; `--per-addr K` gives K agents
each address (several launchers per host, one per GPU). `--hogs J` keeps J busy-looping
processes running through each run (the machine made busy on purpose); `--lock FILE`
holds an flock on FILE around each run (a machine shared with others). Every process
group is killed at the end of a run, whatever happened.
"""
import argparse
import collections
import fcntl
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench import free_port, wait_for  # noqa: E402  (the one home of these helpers)


def error_kind(line):
    """An agent's error line with what differs between agents (numbers, keys, addresses,
    the run id) taken out, so that equal causes count together."""
    line = line.split("error: ", 1)[-1].strip()
    line = re.sub(r"'procs\d+' \(c10d at [^)]*\)", "RDZV", line)
    line = re.sub(r"\d+\.\d+\.\d+\.\d+(:\d+)?", "ADDR", line)
    line = re.sub(r"ddprun/rdzv/\S*", "KEY", line)
    line = re.sub(r"\d+", "#", line)
    return line[:200]


class LoadWatch:
    """The highest 1-minute load average seen while a run goes (sampled every second)."""

    def __init__(self):
        self.peak = os.getloadavg()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, os.getloadavg()[0])

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def start_hogs(count):
    hog = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", hog], start_new_session=True)
            for _ in range(count)]


def agent_argv(ddprun, n, i, port, per_addr, d):
    host = i // per_addr
    return [ddprun, "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-id", f"procs{port}",
            "--local-addr", f"127.0.{host // 250}.{host % 250 + 1}", "--no-python",
            "/bin/sh", "-c", f'touch "{d}/w.$RANK"']


def summarize_logs(d, n):
    rounds = {0}  # the agents log at WARNING: only a new round leaves a line
    restarts = 0
    errors = collections.Counter()
    for i in range(n):
        text = (d / f"agent.{i}.log").read_text(errors="replace")
        started = re.findall(r"starting round (\d+)", text)
        rounds.update(int(r) for r in started)
        rounds.update(int(r) + 1 for r in re.findall(r"round (\d+): .*a new round is needed",
                                                     text))
        restarts += len(started)
        for line in text.splitlines():
            if "error: " in line:
                errors[error_kind(line)] += 1
    return sorted(rounds), restarts, errors


def run(a, n):
    d = Path(tempfile.mkdtemp(prefix=f"rdzv{n}-"))
    port = free_port()
    load = os.getloadavg()[0]
    procs, logs = [], []
    hogs = start_hogs(a.hogs)
    try:
        t_first = time.perf_counter()
        for i in range(n):
            log = open(d / f"agent.{i}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(agent_argv(a.ddprun, n, i, port, a.per_addr, d),
                                          stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        t_last = time.perf_counter()
        ran = wait_for(lambda: len(list(d.glob("w.*"))) >= n, a.timeout, 0.01)
        took = time.perf_counter() - t_last
        workers = len(list(d.glob("w.*")))
        wait_for(lambda: all(p.poll() is not None for p in procs), a.timeout, 0.05)
        ended = time.perf_counter() - t_last
        codes = collections.Counter(p.poll() for p in procs)
        rounds, restarts, errors = summarize_logs(d, n)
        return {"n": n, "s": round(took, 2) if ran else None, "workers": workers,
                "rounds": rounds, "starting_round_lines": restarts, "exit_codes": dict(codes),
                "errors": errors, "load1": round(load, 1), "start_s": t_last - t_first,
                "ended_s": round(ended, 1), "dir": str(d)}
    finally:
        for p in procs + hogs:
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
        if not a.keep:
            subprocess.run(["rm", "-rf", str(d)])


def locked(path):
    if not path:
        return None
    f = open(path, "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def report(r, n, a, peak):
    ok = r["s"] is not None and r["exit_codes"] == {0: n} and r["rounds"] == [0]
    print(f"N={n}: {'OK' if ok else 'FAILED'} workers ran {r['s']} s after the last agent's "
          f"start ({r['workers']}/{n}; starting them took {r['start_s']:.1f} s; all agents "
          f"ended {r['ended_s']} s after); rounds {r['rounds']}, 'starting round' lines "
          f"{r['starting_round_lines']}; exit codes {r['exit_codes']}; load {r['load1']} at "
          f"start, {peak:.1f} at most; {a.per_addr} agent(s) per address, {a.hogs} "
          f"hog(s)" + (f"; logs {r['dir']}" if a.keep else ""), flush=True)
    for msg, count in r["errors"].most_common():
        print(f"    {count:5d} x {msg}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="+", type=int)
    ap.add_argument("--ddprun", default=str(ROOT / "build/rel/launcher/ddprun"))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--per-addr", type=int, default=1, help="agents per --local-addr")
    ap.add_argument("--hogs", type=int, default=0, help="busy-looping processes beside")
    ap.add_argument("--lock", help="flock this file around each run")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--keep", action="store_true", help="keep the agents' logs")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    failed = 0
    for n in a.sizes:
        formed = 0
        for _ in range(a.runs):
            lock = locked(a.lock)
            try:
                watch = LoadWatch()
                r = run(a, n)
                formed += report(r, n, a, watch.stop())
            finally:
                if lock:
                    lock.close()
        print(f"N={n}: formed {formed} of {a.runs}", flush=True)
        failed += a.runs - formed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
