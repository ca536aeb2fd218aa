"""bench.py: runs every ddprun benchmark comparison and writes docs/benchmarks.md.

Called by bench/run after the Release build; standard library only. Each comparison runs
when its binaries exist and is reported as "skipped: <binary> not built" otherwise.
Repetitions are interleaved across the compared tools (rep 1 of every tool, then rep 2,
...) so that background noise on a shared machine hits all of them alike; tables show the
median with min and max.
"""
import argparse
import datetime
import functools
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PY = "/usr/bin/python3"  # Debian's interpreter with python3-torch (1.13)
# Debian 13's python3-torch 2.6 (built without libuv), in the chroot of scripts/torch-chroot trixie.
PY26 = str(ROOT / "scripts" / "python-torch26")
# Debian sid's python3-torch 2.14 (Python 3.14, no libuv either), in the chroot of
# scripts/torch-chroot sid: the newest anchor.
PY214 = str(ROOT / "scripts" / "python-torch214")
# The PyTorch 2.x tiers: (version, interpreter, chroot suite). Their torchrun runs through
# bench/torchrun26.py (TCPStore without libuv), their store server through pytorch_store.py.
NEW_TORCH = (("2.6", PY26, "trixie"), ("2.14", PY214, "sid"))
# Launcher tools after ddprun, with their column names.
TORCHRUNS = (("torchrun", "torchrun 1.13"),) + tuple(
    (f"torchrun-{v}", f"torchrun {v}") for v, _, _ in NEW_TORCH)


@functools.lru_cache(maxsize=None)
def has_torch(python):
    """Whether `python` imports torch (asked once per run: a chroot's import takes seconds)."""
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def is_torchrun(tool):
    return tool.startswith("torchrun")


# ------------------------------------------------------------------------------------------
# Small helpers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def med(xs):
    return statistics.median(xs) if xs else None


def fmt_num(x, unit=""):
    if x is None:
        return "-"
    if abs(x) >= 100:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"
    return s + unit


def fmt_stat(xs, unit="", scale=1.0):
    """'median (min-max)' of the successful values; the failures are counted."""
    ok = [x * scale for x in xs if isinstance(x, (int, float))]
    bad = [x for x in xs if not isinstance(x, (int, float))]
    if not ok:
        return bad[0] if bad else "-"
    s = fmt_num(med(ok), unit)
    if len(ok) > 1:
        s += f" ({fmt_num(min(ok))}-{fmt_num(max(ok))})"
    if bad:
        s += f" [{len(bad)}/{len(xs)} {bad[0]}]"
    return s


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def wait_for(pred, timeout, step=0.002):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def kill_tree(proc):
    """Ends a benchmark child and anything left in its process group (we start every
    child in its own session, so the group is exactly what we launched)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


# ------------------------------------------------------------------------------------------
# Machine description


def machine():
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem_kb = int(line.split()[1])

    def cmd(args):
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=60).stdout.strip()
        except Exception as e:  # noqa: BLE001 - a missing tool is reported, not fatal
            return f"unavailable ({e.__class__.__name__})"

    torch = cmd([PY, "-c", "import torch; print(torch.__version__)"])
    newer = {f"torch{v.replace('.', '')}": cmd([py, "-c", "import torch, sys; print("
                                                  "torch.__version__, 'on Python', "
                                                  "sys.version.split()[0])"])
             for v, py, _ in NEW_TORCH}
    redis = cmd(["redis-server", "--version"])
    m = re.search(r"v=(\S+)", redis)
    version = re.search(r"project\(ddprun VERSION (\S+)", (ROOT / "CMakeLists.txt").read_text())
    commit = cmd(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = cmd(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "ddprun": f"{version.group(1) if version else '?'} (git {commit}{', modified' if dirty else ''})",
        "torch": torch,
        **newer,
        "redis": m.group(1) if m else redis,
        "python": cmd([PY, "-c", "import sys; print(sys.version.split()[0])"]),
        "nofile": cmd(["sh", "-c", "ulimit -n"]),
        "load_start": os.getloadavg(),
    }


def cpu_seconds():
    """(CPU seconds the whole machine has been busy, CPU seconds of this process and of its
    waited-for descendants): their growth apart is what other work used meanwhile. The load
    average cannot tell: the 256-agent rendezvous alone raises it to ~20."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait
    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        own += r.ru_utime + r.ru_stime
    return busy / os.sysconf("SC_CLK_TCK"), own


# ------------------------------------------------------------------------------------------
# Store servers


class Server:
    """One store server process on a loopback port; `kind` names it in the tables."""

    def __init__(self, name, argv, port_from, tmp):
        self.name, self.argv, self.port_from = name, argv, port_from
        self.log = open(tmp / f"{name}.log", "w")
        self.proc = None
        self.port = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, start_new_session=True)
        self.port = self.port_from(self.proc)
        if self.port is None:
            kill_tree(self.proc)
            raise RuntimeError(f"{self.name} did not start (see its log)")

    def stop(self):
        if self.proc:
            kill_tree(self.proc)

    def cpu_s(self):
        """User + system CPU seconds the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_line_port(pattern, timeout):
    def get(proc):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = proc.stdout.readline()
            if not line:
                return None
            m = re.search(pattern, line)
            if m:
                return int(m.group(1))
        return None
    return get


def make_servers(bins, tmp):
    """name -> (Server or skip reason, [protocols to drive it with])."""
    out = {}
    if bins["ddprun-store"]:
        out["ddprun-store"] = (Server("ddprun-store", [bins["ddprun-store"], "serve", "--host",
                                                       "127.0.0.1", "--port", "0"],
                                      read_line_port(r"listening on \S*:(\d+)", 30), tmp),
                               ["modern", "legacy"])
    else:
        out["ddprun-store"] = ("skipped: ddprun-store not built", ["modern", "legacy"])
    if shutil.which(PY) and subprocess.run([PY, "-c", "import torch"],
                                           capture_output=True).returncode == 0:
        out["pytorch-1.13"] = (Server("pytorch-1.13", [PY, str(BENCH / "pytorch_store.py")],
                                      read_line_port(r"^(\d+)$", 120), tmp), ["legacy"])
    else:
        out["pytorch-1.13"] = ("skipped: python3-torch not installed", ["legacy"])
    # 2.6's and 2.14's non-libuv servers (their builds have no libuv) speak the 2.2+ dialect.
    for v, py, suite in NEW_TORCH:
        name = f"pytorch-{v}"
        if has_torch(py):
            out[name] = (Server(name, [py, str(BENCH / "pytorch_store.py")],
                                read_line_port(r"^(\d+)$", 120), tmp), ["modern"])
        else:
            out[name] = (f"skipped: no PyTorch {v} chroot (scripts/torch-chroot {suite})",
                         ["modern"])
    if shutil.which("redis-server"):
        port = free_port()

        def redis_ready(proc, port=port):
            ok = wait_for(lambda: _can_connect(port), 30, 0.01)
            return port if ok and proc.poll() is None else None
        # maxclients above the 10,000 default so the 10,000-client barrier fits; no
        # persistence, as a store for rendezvous would run.
        out["redis"] = (Server("redis", ["redis-server", "--port", str(port), "--bind",
                                         "127.0.0.1", "--save", "", "--appendonly", "no",
                                         "--maxclients", "15000"], redis_ready, tmp), ["redis"])
    else:
        out["redis"] = ("skipped: redis-server not installed", ["redis"])
    return out


def _can_connect(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def loadgen(bins, args, timeout):
    """Runs ddprun-loadgen; returns its JSON dict or a short failure string."""
    try:
        r = subprocess.run([bins["ddprun-loadgen"]] + args, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if r.stdout.strip():
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except json.JSONDecodeError:
            pass
    err = (r.stderr.strip().splitlines() or ["rc=%d" % r.returncode])[-1]
    return "failed: " + err.replace("ddprun-loadgen: error: ", "")[:80]


def bench_store(bins, cfg, tmp, results):
    servers = make_servers(bins, tmp)
    targets = []  # (label, server name, proto)
    for name, (srv, protos) in servers.items():
        for p in protos:
            targets.append((f"{name} ({p})" if name == "ddprun-store" else name, name, p))
    results["store_targets"] = [t[0] for t in targets]
    skipped = {name: srv for name, (srv, _) in servers.items() if isinstance(srv, str)}
    if not bins["ddprun-loadgen"]:
        results["store_skipped"] = "skipped: ddprun-loadgen not built"
        return
    running = {}
    for name, (srv, _) in servers.items():
        if isinstance(srv, str):
            continue
        try:
            srv.start()
            running[name] = srv
        except RuntimeError as e:
            skipped[name] = f"failed: {e}"
    results["store_skip_reasons"] = skipped
    try:
        ops = results.setdefault("ops", {})
        for rep in range(cfg.store_reps):
            for op in cfg.ops:
                for conns in cfg.conns:
                    for label, name, proto in targets:
                        if name not in running:
                            continue
                        cpu0 = running[name].cpu_s()
                        r = loadgen(bins, ["--addr", f"127.0.0.1:{running[name].port}",
                                           "--proto", proto, "--op", op, "--conns", str(conns),
                                           "--seconds", str(cfg.seconds), "--warmup",
                                           str(cfg.warmup), "--value-size", "64",
                                           "--timeout", "60"], 120)
                        if isinstance(r, dict) and r.get("total_ops"):
                            r["cpu_us_per_op"] = ((running[name].cpu_s() - cpu0) /
                                                  r["total_ops"] * 1e6)
                        ops.setdefault(f"{label}|{op}|{conns}", []).append(r)
            log(f"store ops: rep {rep + 1}/{cfg.store_reps} done")
        barrier = results.setdefault("barrier", {})
        for rep in range(cfg.barrier_reps):
            for n in cfg.barrier_n:
                for label, name, proto in targets:
                    if name not in running or running[name].proc.poll() is not None:
                        continue
                    key = f"{label}|{n}"
                    if any(x == "timeout" or (isinstance(x, dict) and x["status"] != "ok")
                           for x in barrier.get(key, [])):
                        continue  # once timed out, don't pay the timeout again
                    cpu0 = running[name].cpu_s()
                    r = loadgen(bins, ["--mode", "barrier", "--addr",
                                       f"127.0.0.1:{running[name].port}", "--proto", proto,
                                       "--conns", str(n), "--timeout", str(cfg.barrier_timeout)],
                                2 * cfg.barrier_timeout + 30)
                    if isinstance(r, dict) and r["status"] == "ok":
                        r["server_cpu_s"] = running[name].cpu_s() - cpu0
                    barrier.setdefault(key, []).append(r)
                    if not (isinstance(r, dict) and r["status"] == "ok"):
                        # a stuck server may still hold the clients' connections: restart it
                        running[name].stop()
                        try:
                            running[name].start()
                        except RuntimeError:
                            del running[name]
            log(f"barrier: rep {rep + 1}/{cfg.barrier_reps} done")
    finally:
        for srv in running.values():
            srv.stop()


# ------------------------------------------------------------------------------------------
# Launchers


def launchers(bins):
    """name -> argv prefix taking torchrun-style options, or a skip reason."""
    out = {}
    out["ddprun"] = [bins["ddprun"]] if bins["ddprun"] else "skipped: ddprun not built"
    if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode == 0:
        out["torchrun"] = [PY, str(BENCH / "torchrun_py311.py")]
    else:
        out["torchrun"] = "skipped: python3-torch not installed"
    for v, py, suite in NEW_TORCH:
        if has_torch(py):
            out[f"torchrun-{v}"] = [py, str(BENCH / "torchrun26.py")]
        else:
            out[f"torchrun-{v}"] = f"skipped: no PyTorch {v} chroot (scripts/torch-chroot {suite})"
    return out


def opt(tool, name, value=None):
    """torchrun 1.13 only knows --x_y spellings; ddprun takes both (torchrun parity)."""
    flag = "--" + (name.replace("-", "_") if is_torchrun(tool) else name)
    return [flag] if value is None else [f"{flag}={value}"]


def standalone_argv(tool, prefix, k, worker):
    argv = list(prefix) + opt(tool, "standalone") + opt(tool, "nproc-per-node", k)
    if is_torchrun(tool):
        argv += opt(tool, "monitor-interval", "0.1")  # the newest default (1.13's is 5 s)
    return argv + opt(tool, "no-python") + worker


def timed_run(argv, timeout, env=None):
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env=env, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timeout"
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        return f"failed: rc={r.returncode}"
    return dt


def bench_launch(bins, cfg, tmp, results):
    tools = launchers(bins)
    results["launch_skip_reasons"] = {k: v for k, v in tools.items() if isinstance(v, str)}
    start = results.setdefault("startup", {})
    for rep in range(cfg.launch_reps):
        for k in cfg.ks:
            floor = "for i in " + " ".join(str(i) for i in range(k)) + "; do /bin/true & done; wait"
            start.setdefault(f"floor|{k}", []).append(timed_run(["sh", "-c", floor], 60))
            for tool, prefix in tools.items():
                if isinstance(prefix, str):
                    continue
                if is_torchrun(tool) and rep >= cfg.torchrun_reps:
                    continue
                argv = standalone_argv(tool, prefix, k, ["true"])
                start.setdefault(f"{tool}|{k}", []).append(timed_run(argv, 120))
        log(f"startup: rep {rep + 1}/{cfg.launch_reps} done")

    fail = results.setdefault("failure", {})
    rss = results.setdefault("rss", {})
    orphans = results.setdefault("orphans", {})
    for rep in range(cfg.failure_reps):
        for tool, prefix in tools.items():
            if isinstance(prefix, str):
                continue
            fail.setdefault(tool, []).append(failure_latency(tool, prefix, tmp))
            if rep < cfg.rss_reps:
                rss.setdefault(tool, []).append(agent_rss(tool, prefix, tmp))
                orphans.setdefault(tool, []).append(orphans_after_kill9(tool, prefix, tmp))
        log(f"failure/rss/orphans: rep {rep + 1}/{cfg.failure_reps} done")
    bench_rendezvous(bins, cfg, tmp, results)


def bench_rendezvous(bins, cfg, tmp, results):
    tools = launchers(bins)
    rdzv = results.setdefault("rdzv", {})
    rounds = results.setdefault("rdzv_rounds", {})

    def record(key, r):
        if isinstance(r, dict):
            rdzv.setdefault(key, []).append(r["s"])
            if r.get("rounds") is not None:
                rounds.setdefault(key, []).append(r["rounds"])
        else:
            rdzv.setdefault(key, []).append(r)
    for rep in range(cfg.rdzv_reps):
        for n in cfg.rdzv_n:
            for tool, prefix in tools.items():
                if isinstance(prefix, str):
                    continue
                if is_torchrun(tool) and (n > cfg.torchrun_rdzv_max or rep >= 1):
                    continue
                key = f"{tool}|{n}"
                if any(isinstance(x, str) for x in rdzv.get(key, [])):
                    continue
                record(key, rendezvous(tool, prefix, n, tmp, cfg))
        log(f"rendezvous: rep {rep + 1}/{cfg.rdzv_reps} done")
    # The same through a 3-member etcd cluster on loopback (etcd-v3 backend).
    ddprun = tools.get("ddprun")
    if not isinstance(ddprun, str) and os.access("/usr/bin/etcd", os.X_OK):
        sys.path.insert(0, str(ROOT / "tests" / "support"))
        import blackbox
        import etcd_cluster
        ws = blackbox.Workspace(None, "ddprun-bench-etcd-")
        try:
            etcd = etcd_cluster.EtcdCluster(ws, 3)
            for rep in range(cfg.rdzv_reps):
                for n in cfg.rdzv_etcd_n:
                    key = f"ddprun-etcd|{n}"
                    if any(isinstance(x, str) for x in rdzv.get(key, [])):
                        continue
                    record(key, rendezvous("ddprun", ddprun, n, tmp, cfg, etcd))
                log(f"rendezvous (etcd-v3): rep {rep + 1}/{cfg.rdzv_reps} done")
        finally:
            ws.close()
    # Simulated agents (threads of ddprun-rdzv-sim, the real join logic) to 16 384.
    sim = results.setdefault("rdzv_sim", {})
    for backend, sizes in (("c10d", cfg.sim_n), ("etcd-v3", cfg.sim_etcd_n)):
        if backend == "etcd-v3" and not os.access("/usr/bin/etcd", os.X_OK):
            continue
        for rep in range(cfg.rdzv_reps):
            for n in sizes:
                key = f"{backend}|{n}"
                if any(isinstance(x, str) for x in sim.get(key, [])) or \
                        (n >= 4096 and sim.get(key)):
                    continue  # a failure, or a large size once: not again
                sim.setdefault(key, []).append(rdzv_sim(bins, backend, n, cfg))
            log(f"rendezvous simulator ({backend}): rep {rep + 1}/{cfg.rdzv_reps} done")


def failure_latency(tool, prefix, tmp):
    """K=4: rank 0 exits 1 after a start barrier; latency until the last peer has SIGTERM."""
    d = Path(tempfile.mkdtemp(dir=tmp, prefix="fail-"))
    k = 4
    argv = standalone_argv(tool, prefix, k, ["/bin/bash", str(BENCH / "fail_worker.sh"),
                                             str(d), str(k)])
    r = timed_run(argv, 120)
    if r == "timeout":
        return "timeout"
    try:
        t_exit = float((d / "exit").read_text().replace(",", "."))
        sig = [float((d / f"sig.{i}").read_text().replace(",", ".")) for i in range(1, k)]
    except (OSError, ValueError):
        return "failed: peers not signalled"
    return max(sig) - t_exit


def agent_rss(tool, prefix, tmp):
    """VmHWM of the agent process while K=8 workers sleep, in MiB."""
    d = Path(tempfile.mkdtemp(dir=tmp, prefix="rss-"))
    k = 8
    worker = ["/bin/sh", "-c", f'touch "{d}/up.$LOCAL_RANK"; sleep 2']
    proc = subprocess.Popen(standalone_argv(tool, prefix, k, worker), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        if not wait_for(lambda: len(list(d.glob("up.*"))) == k, 60, 0.01):
            return "failed: workers did not start"
        time.sleep(0.3)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024
    except (OSError, AttributeError):
        return "failed: no /proc status"
    finally:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        kill_tree(proc)


ORPHAN_WORKERS = 4
ORPHAN_GRACE_S = 3.0


def orphans_after_kill9(tool, prefix, tmp):
    """K=4 sleeping workers, rank 0 with a setsid() daemon: SIGKILL of the agent process
    alone; how many of the 5 are still alive ORPHAN_GRACE_S later (then they are killed)."""
    d = Path(tempfile.mkdtemp(dir=tmp, prefix="orphan-"))
    k = ORPHAN_WORKERS
    worker = ["/bin/bash", str(BENCH / "orphan_worker.sh"), str(d)]
    proc = subprocess.Popen(standalone_argv(tool, prefix, k, worker), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    pids = []
    try:
        if not wait_for(lambda: len(list(d.glob("w.[0-9]*"))) == k and (d / "daemon").exists(),
                        60, 0.01):
            return "failed: workers did not start"
        pids = [int(f.read_text()) for f in list(d.glob("w.[0-9]*")) + [d / "daemon"]]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

        def alive():
            n = 0
            for pid in pids:
                try:
                    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                n += state != "Z"
            return n
        wait_for(lambda: alive() == 0, ORPHAN_GRACE_S, 0.01)
        return alive()
    except (OSError, ValueError) as e:
        return f"failed: {e}"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        kill_tree(proc)


def agent_addr(i):
    """--local-addr of agent i: 127.0.0.1 (the endpoint's, so agent 0 hosts the c10d store),
    then 127.0.1.1 onwards, 250 per /24: distinct for every N this runs."""
    return "127.0.0.1" if i == 0 else f"127.0.{1 + i // 250}.{1 + i % 250}"


ROUND_LINE = re.compile(r"round (\d+) (?:complete|formed)[:,]")


def rendezvous(tool, prefix, n, tmp, cfg, etcd=None):
    """N agents (1 worker each) on one machine, c10d backend (or etcd-v3 through the
    cluster `etcd`, ddprun only): seconds from the last agent's start (its exec, once
    Popen returned) until the last worker ran, as each worker stamps its own start
    ($EPOCHREALTIME), so the harness's polling does not compete with the agents for the
    CPUs or add its period to the time. A dict with "s" and, for ddprun, "rounds" (from
    the agents' logs: 1 when the first round formed)."""
    d = Path(tempfile.mkdtemp(dir=tmp, prefix="rdzv-"))
    port = free_port()
    worker = ["/bin/bash", "-c", f'echo "$EPOCHREALTIME" > "{d}/w.$RANK"']
    procs, logs = [], []
    backend = ["--rdzv-backend=etcd-v3", f"--rdzv-endpoint={etcd.endpoints()}"] if etcd else \
        opt(tool, "rdzv-backend", "c10d") + opt(tool, "rdzv-endpoint", f"127.0.0.1:{port}")
    try:
        t_first = time.time()
        for i in range(n):
            argv = list(prefix) + opt(tool, "nnodes", n) + opt(tool, "nproc-per-node", 1) + \
                backend + opt(tool, "rdzv-id", f"bench{port}")
            if is_torchrun(tool):
                argv += opt(tool, "monitor-interval", "0.1")
            else:
                argv += opt(tool, "local-addr", agent_addr(i))
            argv += opt(tool, "no-python") + worker
            log_path = d / f"agent.{i}.log"
            logs.append(log_path)
            # ddprun logs "round N formed" at INFO (its default is WARNING).
            env = None if is_torchrun(tool) else dict(os.environ, LOGLEVEL="INFO")
            with open(log_path, "w") as log_file:
                procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log_file,
                                              env=env, start_new_session=True))
        t_last = time.time()

        def stamps():
            return list(d.glob("w.*"))
        # The workers time themselves: a slow poll suffices and leaves the CPUs to them.
        if not wait_for(lambda: len(stamps()) >= n or
                        all(p.poll() is not None for p in procs), cfg.rdzv_timeout, 0.1):
            return f"timeout ({len(stamps())}/{n} ran)"
        wait_for(lambda: all(p.poll() is not None for p in procs), 60, 0.05)
        got = stamps()
        bad = [p.returncode for p in procs if p.poll() not in (None, 0)]
        if len(got) < n or bad:
            return f"failed: rc={bad[0] if bad else '?'} ({len(got)}/{n} ran)"
        try:
            t_done = max(float(f.read_text().strip().replace(",", ".")) for f in got)
        except ValueError:
            return "failed: unreadable worker stamp"
        out = {"s": t_done - t_last, "from_first_start_s": t_done - t_first,
               "start_all_s": t_last - t_first}
        if not is_torchrun(tool):
            rounds = [int(m) for path in logs for m in ROUND_LINE.findall(path.read_text())]
            out["rounds"] = max(rounds) + 1 if rounds else None
        return out
    finally:
        for p in procs:
            kill_tree(p)


def rdzv_sim(bins, backend, n, cfg):
    """One run of ddprun-rdzv-sim at N agents: its JSON result, or a short failure."""
    if not bins.get("ddprun-rdzv-sim"):
        return "skipped: ddprun-rdzv-sim not built"
    try:
        # c10d: the store in a process of its own, as on a cluster (and half the open files).
        extra = ["--store-process"] if backend == "c10d" else []
        r = subprocess.run([bins["ddprun-rdzv-sim"], "--backend", backend, "--nodes", str(n),
                            "--json", "--timeout", str(cfg.rdzv_timeout), *extra],
                           capture_output=True, text=True, timeout=3 * cfg.rdzv_timeout + 120)
    except subprocess.TimeoutExpired:
        return "timeout"
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])["results"][0]
    except (IndexError, KeyError, json.JSONDecodeError):
        err = (r.stderr.strip().splitlines() or [f"rc={r.returncode}"])[-1]
        return "failed: " + err[:120]
    return res if res["status"] == "ok" else res["status"][:160]


# ------------------------------------------------------------------------------------------
# Report


def ok_values(xs):
    return [x for x in xs if isinstance(x, (int, float))]


def field(rs, name):
    return [r[name] if isinstance(r, dict) and r.get(name) is not None else
            (r if isinstance(r, str) else (r.get("status", "failed") if isinstance(r, dict)
                                           else "failed")) for r in rs]


def report(results, cfg, m):
    L = []
    out = L.append
    ops = results.get("ops", {})
    targets = results.get("store_targets", [])

    def ops_med(label, op, conns):
        return med(ok_values(field(ops.get(f"{label}|{op}|{conns}", []), "ops_per_s")))

    def cpu_med(label, op, conns):
        return med(ok_values(field(ops.get(f"{label}|{op}|{conns}", []), "cpu_us_per_op")))

    # ---------------- headline
    head = []
    dd_l, dd_m, pt, rd = ("ddprun-store (legacy)", "ddprun-store (modern)", "pytorch-1.13",
                          "redis")
    for op in cfg.ops:
        for lab in (dd_m, dd_l):
            r = ratio(ops_med(lab, op, 64), ops_med(rd, op, 64))
            goal = "≥ 1x" if op != "get" else "≥ 1x (note: 2 round trips vs 1)"
            head.append([f"store {op}, 64 conns: {lab} / Redis (ops/s)", goal, fmt_ratio(r),
                         verdict(r, lambda x: x >= 1.0)])
        r = ratio(ops_med(dd_l, op, 64), ops_med(pt, op, 64))
        head.append([f"store {op}, 64 conns: ddprun-store / PyTorch 1.13 server (legacy, ops/s)",
                     "≥ 3x", fmt_ratio(r), verdict(r, lambda x: x >= 3.0)])
        for other, lab in ((rd, dd_m), (pt, dd_l)):
            r = ratio(cpu_med(other, op, 64), cpu_med(lab, op, 64))
            head.append([f"store {op}, 64 conns: server CPU per op, {other} / {lab}", "-",
                         fmt_ratio(r), ""])
    for v, _, _ in NEW_TORCH:
        ptv = f"pytorch-{v}"
        for op in cfg.ops:
            r = ratio(ops_med(dd_m, op, 64), ops_med(ptv, op, 64))
            head.append([f"store {op}, 64 conns: ddprun-store / PyTorch {v} server (2.2+ "
                         "dialect, ops/s)", "-", fmt_ratio(r), ""])
            r = ratio(cpu_med(ptv, op, 64), cpu_med(dd_m, op, 64))
            head.append([f"store {op}, 64 conns: server CPU per op, {ptv} / {dd_m}", "-",
                         fmt_ratio(r), ""])
    bar = results.get("barrier", {})
    bmax = max(cfg.barrier_n)
    for lab in (dd_m, dd_l):
        v = med(ok_values(field(bar.get(f"{lab}|{bmax}", []), "barrier_s")))
        head.append([f"{bmax:,}-client barrier, {lab} (s)", "< 1 s", fmt_num(v, " s"),
                     verdict(v, lambda x: x < 1.0)])
    vp = med(ok_values(field(bar.get(f"{pt}|{bmax}", []), "barrier_s")))
    vd = med(ok_values(field(bar.get(f"{dd_l}|{bmax}", []), "barrier_s")))
    head.append([f"{bmax:,}-client barrier: PyTorch 1.13 / ddprun-store (legacy), time",
                 "-", fmt_ratio(ratio(vp, vd)) if vp else pt_status(bar.get(f"{pt}|{bmax}")), ""])
    vdm = med(ok_values(field(bar.get(f"{dd_m}|{bmax}", []), "barrier_s")))
    for v, _, _ in NEW_TORCH:
        ptv = f"pytorch-{v}"
        vpv = med(ok_values(field(bar.get(f"{ptv}|{bmax}", []), "barrier_s")))
        head.append([f"{bmax:,}-client barrier: PyTorch {v} / ddprun-store (modern), time", "-",
                     fmt_ratio(ratio(vpv, vdm)) if vpv else pt_status(bar.get(f"{ptv}|{bmax}")),
                     ""])
    for ptv, v, lab in ((pt, "1.13", dd_l),) + tuple((f"pytorch-{v}", v, dd_m)
                                                     for v, _, _ in NEW_TORCH):
        cp = med(ok_values(field(bar.get(f"{ptv}|{bmax}", []), "connect_s")))
        cd = med(ok_values(field(bar.get(f"{lab}|{bmax}", []), "connect_s")))
        head.append([f"{bmax:,}-client connect storm: PyTorch {v} / {lab}, time", "-",
                     fmt_ratio(ratio(cp, cd)) if cp else pt_status(bar.get(f"{ptv}|{bmax}")),
                     ""])
    for other in (pt, rd):
        cp = med(ok_values(field(bar.get(f"{other}|{bmax}", []), "server_cpu_s")))
        cd = med(ok_values(field(bar.get(f"{dd_l if other == pt else dd_m}|{bmax}", []),
                                 "server_cpu_s")))
        head.append([f"{bmax:,}-client connect + barrier: server CPU, {other} / ddprun-store",
                     "-", fmt_ratio(ratio(cp, cd)) if cp else pt_status(
                         bar.get(f"{other}|{bmax}")), ""])
    st = results.get("startup", {})

    def st_med(tool, k):
        return med(ok_values(st.get(f"{tool}|{k}", [])))
    k2 = 2 if 2 in cfg.ks else cfg.ks[0]
    d2 = st_med("ddprun", k2)
    head.append([f"launch K={k2}: ddprun wall time", "≤ 20 ms", fmt_num(d2 and d2 * 1e3, " ms"),
                 verdict(d2, lambda x: x <= 0.020)])
    for k in cfg.ks:
        r = ratio(st_med("ddprun", k), st_med("floor", k))
        head.append([f"launch K={k}: ddprun / shell floor", "≤ 2x", fmt_ratio(r),
                     verdict(r, lambda x: x <= 2.0)])
    torchruns = TORCHRUNS
    for k in cfg.ks:
        for t, name in torchruns:
            head.append([f"launch K={k}: {name} / ddprun", "-",
                         fmt_ratio(ratio(st_med(t, k), st_med("ddprun", k))), ""])
    fl = results.get("failure", {})
    rs = results.get("rss", {})
    for t, name in torchruns:
        fd, ft = med(ok_values(fl.get("ddprun", []))), med(ok_values(fl.get(t, [])))
        head.append([f"worker failure → peers signalled: {name} / ddprun (latency)", "-",
                     fmt_ratio(ratio(ft, fd)), ""])
    for t, name in torchruns:
        rd_, rt = med(ok_values(rs.get("ddprun", []))), med(ok_values(rs.get(t, [])))
        head.append([f"agent peak RSS: {name} / ddprun", "-", fmt_ratio(ratio(rt, rd_)), ""])
    orph = results.get("orphans", {})
    for t, name in (("ddprun", "ddprun"),) + torchruns:
        got = ok_values(orph.get(t, []))
        head.append([f"kill -9 of the agent: processes of the job alive {ORPHAN_GRACE_S:g} s later, "
                     f"{name} (of {ORPHAN_WORKERS + 1})", "0" if t == "ddprun" else "-",
                     str(max(got)) if got else pt_status(orph.get(t)),
                     verdict(max(got) if got else None, lambda x: x == 0) if t == "ddprun" else ""])
    rz = results.get("rdzv", {})
    for n in cfg.rdzv_n:
        if n > cfg.torchrun_rdzv_max:
            continue
        for t, name in torchruns:
            a, b = med(ok_values(rz.get(f"{t}|{n}", []))), med(ok_values(rz.get(f"ddprun|{n}", [])))
            head.append([f"rendezvous of {n} agents: {name} / ddprun (time)", "-",
                         fmt_ratio(ratio(a, b)), ""])

    out("# Benchmarks: ddprun vs torchrun, PyTorch's TCPStore server and Redis\n")
    flag = " --smoke" if cfg.smoke else " --quick" if cfg.quick else ""
    out(f"Generated by `bench/run{flag}` on {m['date']}. "
        "Ratios are the headline: absolute numbers hold only for the machine below. "
        "Each cell is the median of the repetitions, with (min-max). "
        "`bench/run` regenerates this file; do not edit it by hand.\n")
    other = m.get("other_cpus")  # CPUs' worth of other work, averaged over the run
    busy = (f"other work used {other:.2f} of the {m['nproc']} CPUs on average while this ran"
            if other is not None else  # a results.json from before other_cpus
            f"the 1-minute load average was {m['load_start'][0]:.2f} on {m['nproc']} CPUs "
            "when this run started")
    if (other if other is not None else m["load_start"][0]) > 0.25 * (m["nproc"] or 1):
        out(f"**Noisy run:** {busy}, so absolute numbers are inflated and "
            "ratios near 1x are within the noise; see the (min-max) ranges.\n")
    out("## Headline ratios\n")
    out(table(["comparison", "goal", "result", "met"], head))
    out("")
    out("## Machine and versions\n")
    la0, la1 = m["load_start"], m.get("load_end", (0, 0, 0))
    out(table(["", ""], [
        ["CPU", f"{m['nproc']} × {m['cpu']}"], ["memory", f"{m['mem_gib']} GiB"],
        ["kernel", m["kernel"]], ["ddprun", m["ddprun"]], ["torch (Debian python3-torch)",
                                                          m["torch"]],
        ["torch 2.6 (Debian 13 python3-torch, chroot)", m.get("torch26", "-")],
        ["torch 2.14 (Debian sid python3-torch, chroot)", m.get("torch214", "-")],
        ["Python", m["python"]], ["redis-server", m["redis"]],
        ["RLIMIT_NOFILE (soft)", m["nofile"]],
        ["load average (1 min) at start / end", f"{la0[0]:.2f} / {la1[0]:.2f}"],
        ["other work during the run (CPUs, average)",
         f"{m['other_cpus']:.2f}" if "other_cpus" in m else "not measured"],
        ["mode", ("--smoke: " if cfg.smoke else "--quick: " if cfg.quick else "full: ") +
         cfg.describe()],
    ]))
    out("")
    skips = dict(results.get("store_skip_reasons", {}))
    skips.update(results.get("launch_skip_reasons", {}))
    if results.get("store_skipped"):
        skips["store benchmarks"] = results["store_skipped"]
    if skips:
        out("Not measured in this run:\n")
        for k, v in skips.items():
            out(f"- {k}: {v}")
        out("")

    # ---------------- store tables
    out("## Store: closed-loop throughput and latency\n")
    out("One `ddprun-loadgen` thread (epoll) holds all connections; each connection keeps one "
        "request in flight. Values are 64 bytes; every connection uses its own key. "
        f"{cfg.seconds} s measured after {cfg.warmup} s warm-up, {cfg.store_reps} repetitions.\n")
    out("- **set**: TCPStore SET has no reply, so the loadgen sends SET + CHECK(key) in one "
        "write and counts the op when CHECK answers (an acknowledged write); Redis: SET.")
    out("- **get**: as PyTorch clients do it, WAIT(key) and, once answered, GET(key): two round "
        "trips; Redis: one GET.")
    out("- **add**: ADD(key, 1); Redis: INCRBY key 1.\n")
    out("Servers: `ddprun-store` driven in both dialects; `pytorch-1.13` is the TCPStore server "
        "inside Debian 12's torch 1.13 (legacy dialect only); `pytorch-2.6` is the one inside "
        "Debian 13's torch 2.6 (`bench/pytorch_store.py` in the chroot of "
        "`scripts/torch-chroot trixie`) and `pytorch-2.14` the one inside Debian sid's torch "
        "2.14 (the same script in the chroot of `scripts/torch-chroot sid`, through "
        "`scripts/python-torch214`): their non-libuv servers, since neither build has libuv "
        "(`use_libuv=False`, as `USE_LIBUV=0` asks), driven with the 2.2+ dialect.\n")
    out("On a machine with few cores the single-threaded servers and the load generator share "
        "the CPUs, so ops/s is capped by the client as much as by the server; **server CPU per "
        "op** (the server process's user + system time over the run divided by the ops it "
        "served) measures the server alone and is the steadier comparison there.\n")
    for op in cfg.ops:
        out(f"### {op}: ops/s\n")
        rows = []
        for c in cfg.conns:
            rows.append([c] + [fmt_stat(field(ops.get(f"{t}|{op}|{c}", []), "ops_per_s"))
                               for t in targets])
        out(table(["conns"] + targets, rows))
        out("")
        out(f"### {op}: server CPU time per op (µs, user + system)\n")
        rows = []
        for c in cfg.conns:
            rows.append([c] + [fmt_stat(field(ops.get(f"{t}|{op}|{c}", []), "cpu_us_per_op"))
                               for t in targets])
        out(table(["conns"] + targets, rows))
        out("")
        out(f"### {op}: latency p50 / p99 (µs, medians over repetitions)\n")
        rows = []
        for c in cfg.conns:
            row = [c]
            for t in targets:
                rs_ = ops.get(f"{t}|{op}|{c}", [])
                p50 = med(ok_values(field(rs_, "p50_us")))
                p99 = med(ok_values(field(rs_, "p99_us")))
                row.append("-" if p50 is None else f"{fmt_num(p50)} / {fmt_num(p99)}")
            rows.append(row)
        out(table(["conns"] + targets, rows))
        out("")

    out("## Store: connect storm and barrier storm\n")
    out("N clients connect at once (non-blocking connects from one thread) and complete a "
        "handshake (modern: VALIDATE + PING; legacy: CHECK of no keys; Redis: PING): "
        "**connect** is the time to the last handshake reply. Then every client sends ADD(count, 1); "
        "the one that gets N sets the `done` key; every client WAITs on `done`: **barrier** is "
        "the time from the first ADD to the last release. Redis runs the same barrier as INCR, "
        "then BLPOP on a list into which the N-th client RPUSHes N tokens. "
        f"Connecting and the barrier are each bounded by a {cfg.barrier_timeout} s timeout; "
        f"{cfg.barrier_reps} repetitions. Server CPU is read from /proc in clock ticks "
        f"({1000 // os.sysconf('SC_CLK_TCK')} ms), so only the larger runs resolve. "
        "Unlike a real 1.13 client, which also opens a silent callback connection, the "
        "loadgen opens one connection per client.\n")
    if cfg.nofile_note:
        out(cfg.nofile_note + "\n")
    for what, fieldname in (("barrier", "barrier_s"), ("connect", "connect_s"),
                            ("server CPU for connect + barrier", "server_cpu_s")):
        out(f"### {what} (ms)\n")
        rows = []
        for n in cfg.barrier_n:
            rows.append([f"{n:,}"] + [fmt_stat(field(bar.get(f"{t}|{n}", []), fieldname),
                                               scale=1e3) for t in targets])
        out(table(["clients"] + targets, rows))
        out("")

    # ---------------- launcher tables
    out("## Launcher: wall time of `--standalone --nproc-per-node=K --no-python true`\n")
    out("Timed from fork to exit by the harness. torchrun 1.13 is Debian 12's "
        "(`/usr/bin/python3 -m torch.distributed.run` through `bench/torchrun_py311.py`, which "
        "only repairs the Python 3.11 `Std.from_str` crash so that torchrun keeps its default "
        "`-r 0 -t 0`), with `--monitor_interval=0.1` (the newest default). torchrun 2.6 is "
        "Debian 13's (Python 3.13, in the chroot of `scripts/torch-chroot trixie`, through "
        "`bench/torchrun26.py`, which only makes TCPStore default to `use_libuv=False`, since "
        "that build has no libuv). torchrun 2.14, the newest anchor, is Debian sid's "
        "(PyTorch 2.14.1 on Python 3.14, in the chroot of `scripts/torch-chroot sid`, run by "
        "`scripts/python-torch214`, which enters it in a private mount namespace), through the "
        "same `bench/torchrun26.py`, since sid's build has no libuv either. The 2.x times "
        "include entering the chroot (`unshare -m`, the mounts, `chroot` + `sh`). The floor is "
        "`sh -c 'for i in ...; do /bin/true & done; wait'` (exec'ing /bin/true as the "
        f"launchers do, not the shell builtin). {cfg.launch_reps} repetitions "
        f"({cfg.torchrun_reps} for torchrun).\n")
    rows = []
    for k in cfg.ks:
        rows.append([k] + [fmt_stat(st.get(f"{t}|{k}", []), " ms", 1e3)
                           for t in ("floor", "ddprun") + tuple(t for t, _ in TORCHRUNS)])
    out(table(["K", "shell floor", "ddprun"] + [n for _, n in TORCHRUNS], rows))
    out("")
    out("## Launcher: worker failure → peers signalled, and agent memory\n")
    out("K = 4 workers (`bench/fail_worker.sh`): after a start barrier rank 0 stamps "
        "`$EPOCHREALTIME` and exits 1; the other ranks trap SIGTERM and stamp the time it "
        "arrives. Latency = last peer's stamp - rank 0's exit stamp. Peak RSS is VmHWM of the "
        "agent process (the process the user started) while K = 8 workers sleep. Orphans: K = 4 "
        "sleeping workers, rank 0 also starts a `setsid` daemon; the agent process alone gets "
        "SIGKILL (as from the OOM killer or `kill -9`), and the row counts the workers and the "
        f"daemon still alive {ORPHAN_GRACE_S:g} s later (worst of the repetitions).\n")
    tools = ("ddprun",) + tuple(t for t, _ in TORCHRUNS)
    out(table(["", "ddprun"] + [n for _, n in TORCHRUNS], [
        ["failure → all peers signalled"] + [fmt_stat(fl.get(t, []), " ms", 1e3)
                                             for t in tools],
        ["agent peak RSS (VmHWM)"] + [fmt_stat(rs.get(t, []), " MiB") for t in tools],
        [f"alive {ORPHAN_GRACE_S:g} s after kill -9 of the agent (of {ORPHAN_WORKERS + 1})"] +
        [fmt_orphans(orph.get(t, [])) for t in tools],
    ]))
    out("")
    out("## Rendezvous of N agents on one machine (c10d backend)\n")
    out("N agent processes, 1 worker each, `--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT`, "
        "started one after another from the harness (ddprun agents use distinct "
        "`--local-addr`: 127.0.0.1 for the first, which hosts the store, then 127.0.1.1 "
        "onwards). Time from the last agent's start (its exec) to the start of the last "
        "worker, which each worker stamps itself (`$EPOCHREALTIME`), so the harness only "
        "polls every 100 ms and takes no CPU from the agents. **rounds**: the round the "
        "ddprun agents formed in, plus 1, from their logs (1: the first round formed; more: "
        "slow steps made agents start new rounds). torchrun is run up to "
        f"N = {cfg.torchrun_rdzv_max}, once each; every run has a {cfg.rdzv_timeout} s "
        "timeout. The etcd-v3 column: the same agents with `--rdzv-backend=etcd-v3` through a "
        "3-member etcd on loopback, on the same CPUs.\n")
    rerun = results.get("rdzv_rerun")
    if rerun:
        out(f"This table was re-run alone (`bench/run --only rendezvous`) on {rerun['date']} "
            f"with ddprun {rerun['ddprun']}; other work used {rerun['other_cpus']:.2f} CPUs "
            "on average meanwhile. The rest of this report is from the full run above.\n")
    rr = results.get("rdzv_rounds", {})

    def fmt_rounds(key):
        got = rr.get(key, [])
        return "-" if not got else "/".join(str(x) for x in got)
    rows = []
    for n in cfg.rdzv_n:
        rows.append([n, fmt_stat(rz.get(f"ddprun|{n}", []), " ms", 1e3), fmt_rounds(f"ddprun|{n}")] +
                    [fmt_stat(rz.get(f"{t}|{n}", []), " ms", 1e3)
                     if n <= cfg.torchrun_rdzv_max else "not run" for t in tools[1:]] +
                    [fmt_stat(rz.get(f"ddprun-etcd|{n}", []), " ms", 1e3)
                     if n in cfg.rdzv_etcd_n else "not run", fmt_rounds(f"ddprun-etcd|{n}")])
    out(table(["N agents", "ddprun", "rounds"] + [n for _, n in TORCHRUNS] + [
               "ddprun etcd-v3 (3-member etcd)", "rounds"], rows))
    out("")
    out("### Simulated agents (ddprun-rdzv-sim)\n")
    out("`ddprun-rdzv-sim` runs N agents as threads of one process: each is the handler the "
        "launcher builds (`make_rendezvous_handler`), running the real join, heartbeat and "
        "exit-barrier code over real loopback sockets. c10d: against a `TcpStoreServer` that no "
        "agent hosts, in a process of its own (`--store-process`: forked before the agents "
        "start, so the agents' process holds 2 open files per agent), counting at the server "
        "every request it handled "
        "and every byte it read and wrote; etcd-v3: against a fresh 1-member etcd (data in "
        "/dev/shm), counting its `grpc_server_started_total` (every RPC, through its JSON "
        "gateway too; a watch stream counts once) and gRPC bytes from /metrics. **form**: "
        "from the first agent's start to the last `next_rendezvous()` returning; "
        "requests and bytes are per agent (the round's total / N); **exit**: the exit "
        "barrier's requests per agent. A size that cannot run here (threads, open files) says "
        "why. See the section on the simulator below for what it shows.\n")
    sm = results.get("rdzv_sim", {})

    def sim_cell(backend, n, what):
        rs = sm.get(f"{backend}|{n}")
        if not rs:
            return "not run"
        if what == "time":
            return fmt_stat([r["form"]["wall_s"] if isinstance(r, dict) else r for r in rs],
                            " ms", 1e3)
        ok = [r for r in rs if isinstance(r, dict)]
        if not ok:
            return "-"
        if what == "rounds":
            return "/".join(str(r["rounds"]) for r in ok)
        phase, field_ = what.split(".")
        return fmt_num(med([r[phase][field_] for r in ok]))
    cols = [("time to form", "time"), ("rounds", "rounds"),
            ("requests/agent", "form.requests_per_agent"),
            ("bytes in/agent", "form.bytes_in_per_agent"),
            ("bytes out/agent", "form.bytes_out_per_agent"),
            ("exit: requests/agent", "exit.requests_per_agent")]
    rows = []
    for n in sorted(set(cfg.sim_n) | set(cfg.sim_etcd_n)):
        rows.append([f"{n:,}"] + [sim_cell("c10d", n, w) for _, w in cols] +
                    [sim_cell("etcd-v3", n, w) for _, w in cols[:4]])
    out(table(["N agents"] + [f"c10d: {c}" for c, _ in cols] +
              [f"etcd-v3: {c}" for c, _ in cols[:4]], rows))
    out("")
    out("## How to reproduce\n")
    out("```\nbench/run            # full run (about 15 minutes on 2 cores)\n"
        "bench/run --quick    # under 3 minutes: fewer connection counts and repetitions\n"
        "bench/run --smoke    # each column once, into build/bench/smoke.md: does it run?\n"
        "bench/run --only rendezvous   # the rendezvous tables again, into the last full run\n"
        "```\n")
    out("`bench/run` installs what is missing from Debian (the build dependencies via "
        "scripts/install-deps, python3-torch, redis-server) and, as root, the PyTorch 2.6 and 2.14 "
        "chroots (scripts/torch-chroot trixie, scripts/torch-chroot sid), builds Release into build/bench, "
        "raises RLIMIT_NOFILE to the hard limit, runs `bench/bench.py` and rewrites this file. "
        "Raw results: build/bench/results.json. The store benchmark alone: "
        "`build/bench/bench/ddprun-loadgen --help`; the rendezvous simulator alone: "
        "`build/bench/bench/ddprun-rdzv-sim --help`; server CPU per request against PyTorch "
        "1.13's server, runs interleaved: `bench/store_cpu.py`.")
    return "\n".join(L) + "\n"


def fmt_orphans(xs):
    got = ok_values(xs)
    if not got:
        return pt_status(xs) if xs else "-"
    return f"{max(got)}"


def pt_status(rs):
    """The failure of a comparison target, for a headline row without a ratio."""
    for r in rs or []:
        if isinstance(r, str):
            return r
        if isinstance(r, dict) and r.get("status") != "ok":
            return r.get("status", "failed")
    return "-"


def verdict(v, pred):
    if v is None:
        return "not measured"
    return "yes" if pred(v) else "**no**"


# ------------------------------------------------------------------------------------------


class Config:
    def __init__(self, quick, nofile, smoke=False):
        self.quick, self.smoke = quick, smoke
        self.ops = ["set", "get", "add"]
        if smoke:  # one repetition of one size each: checks that every column runs
            self.conns, self.store_reps, self.seconds, self.warmup = [64], 1, 0.25, 0.05
            self.barrier_n, self.barrier_reps, self.barrier_timeout = [1000], 1, 15
            self.ks, self.launch_reps, self.torchrun_reps = [2], 1, 1
            self.failure_reps, self.rss_reps = 1, 1
            self.rdzv_n, self.rdzv_reps, self.torchrun_rdzv_max, self.rdzv_timeout = [4], 1, 4, 60
            self.rdzv_etcd_n, self.sim_n, self.sim_etcd_n = [4], [4, 64], [4]
        elif quick:
            self.conns, self.store_reps, self.seconds, self.warmup = [1, 64, 1000], 3, 0.25, 0.05
            self.barrier_n, self.barrier_reps, self.barrier_timeout = [100, 1000, 10000], 2, 15
            self.ks, self.launch_reps, self.torchrun_reps = [1, 2, 8, 32], 5, 2
            self.failure_reps, self.rss_reps = 2, 1
            self.rdzv_n, self.rdzv_reps, self.torchrun_rdzv_max, self.rdzv_timeout = [4, 16], 2, 4, 60
            self.rdzv_etcd_n, self.sim_n, self.sim_etcd_n = [4, 16], [4, 16, 64, 256], [4, 16]
        else:
            self.conns, self.store_reps, self.seconds, self.warmup = [1, 16, 64, 256, 1000], 5, 1.0, 0.2
            self.barrier_n, self.barrier_reps, self.barrier_timeout = [100, 1000, 10000], 5, 60
            self.ks, self.launch_reps, self.torchrun_reps = [1, 2, 8, 32], 10, 3
            self.failure_reps, self.rss_reps = 5, 3
            self.rdzv_n, self.rdzv_reps, self.torchrun_rdzv_max, self.rdzv_timeout = \
                [4, 16, 64, 256, 1024], 3, 16, 180
            self.rdzv_etcd_n = [4, 16, 64, 256]
            self.sim_n = [4, 16, 64, 256, 1024, 4096, 8192, 16384]
            self.sim_etcd_n = [4, 16, 64, 256]
        self.nofile_note = ""
        need = max(self.barrier_n) + 64
        if nofile < need:
            dropped = [n for n in self.barrier_n if n + 64 > nofile]
            self.barrier_n = [n for n in self.barrier_n if n + 64 <= nofile]
            self.nofile_note = (f"Left out: {dropped} clients, because "
                                f"RLIMIT_NOFILE's hard limit here is {nofile}, and a client "
                                "needs one descriptor per connection (as does each server).")

    def describe(self):
        return (f"conns {self.conns}, {self.store_reps} reps × {self.seconds} s; barrier N "
                f"{self.barrier_n}; K {self.ks}; rendezvous N {self.rdzv_n} (etcd-v3 "
                f"{self.rdzv_etcd_n}); simulated N {self.sim_n} (etcd-v3 {self.sim_etcd_n})")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="one repetition of one size per table, to check that every column "
                    "runs; writes BUILD/smoke.md and BUILD/smoke-results.json unless --out")
    ap.add_argument("--build", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--out")
    ap.add_argument("--only", choices=["store", "launch", "rendezvous"],
                    help="run one part; 'rendezvous' re-runs the rendezvous tables into the "
                    "last full run's results.json (the report says so)")
    ap.add_argument("--from-json", help="rewrite the report from a results.json, run nothing")
    a = ap.parse_args()
    build = Path(a.build)
    if a.out is None:
        a.out = str(build / "smoke.md") if a.smoke else str(ROOT / "docs" / "benchmarks.md")
    if a.from_json:
        results = json.loads(Path(a.from_json).read_text())
        m = results["machine"]
        cfg = Config(results.get("quick", a.quick), 1 << 30, results.get("smoke", False))
        text = report(results, cfg, m) + f"\nThis run took {results['elapsed_s']:.0f} s.\n"
        Path(a.out).write_text(text)
        print(text)
        return

    def binary(rel):
        p = build / rel
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    bins = {"ddprun-loadgen": binary("bench/ddprun-loadgen"),
            "ddprun-store": binary("store/ddprun-store"),
            "ddprun": binary("launcher/ddprun"),
            "ddprun-rdzv-sim": binary("bench/ddprun-rdzv-sim")}
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    cfg = Config(a.quick, nofile, a.smoke)
    m = machine()
    results = {}
    t0 = time.monotonic()
    busy0, own0 = cpu_seconds()
    if a.only == "rendezvous":
        prev = build / ("smoke-results.json" if a.smoke else "results.json")
        if prev.exists():
            results = json.loads(prev.read_text())
        else:
            # No full run to merge into: a report of the rendezvous tables alone, which
            # must not replace docs/benchmarks.md.
            results = {"machine": m, "quick": a.quick, "smoke": a.smoke, "elapsed_s": 0.0}
            if a.out == str(ROOT / "docs" / "benchmarks.md"):
                a.out = str(build / "rendezvous.md")
                log(f"bench.py: no {prev} (run bench/run first); this report goes to {a.out}")
        with tempfile.TemporaryDirectory(prefix="ddprun-bench-") as tmpname:
            for k in ("rdzv", "rdzv_rounds", "rdzv_sim"):
                results.pop(k, None)
            bench_rendezvous(bins, cfg, Path(tmpname), results)
        busy1, own1 = cpu_seconds()
        results["rdzv_rerun"] = {
            "date": m["date"], "ddprun": m["ddprun"],
            "other_cpus": max(0.0, (busy1 - busy0) - (own1 - own0)) / (time.monotonic() - t0)}
        write_report(results, cfg, build, a.out, a.smoke)
        return
    with tempfile.TemporaryDirectory(prefix="ddprun-bench-") as tmpname:
        tmp = Path(tmpname)
        if a.only in (None, "store"):
            bench_store(bins, cfg, tmp, results)
        if a.only in (None, "launch"):
            bench_launch(bins, cfg, tmp, results)
    m["load_end"] = os.getloadavg()
    busy1, own1 = cpu_seconds()
    m["other_cpus"] = max(0.0, (busy1 - busy0) - (own1 - own0)) / (time.monotonic() - t0)
    results["machine"] = m
    results["quick"], results["smoke"] = a.quick, a.smoke
    results["elapsed_s"] = time.monotonic() - t0
    write_report(results, cfg, build, a.out, a.smoke)


HAND_MARKER = "## Measured by hand"


def write_report(results, cfg, build, out, smoke=False):
    """Saves results.json (smoke-results.json for --smoke, so a smoke run never replaces the
    full run's) in the build directory and writes the report to `out`."""
    (build / ("smoke-results.json" if smoke else "results.json")).write_text(json.dumps(results, indent=1, default=str))
    text = report(results, cfg, results["machine"])
    text += f"\nThis run took {results['elapsed_s']:.0f} s.\n"
    # Sections measured by hand (bench/store_cpu.py ...) stay below the generated report.
    old = Path(out).read_text() if Path(out).exists() else ""
    if HAND_MARKER in old:
        text += "\n" + old[old.index(HAND_MARKER):]
    Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
