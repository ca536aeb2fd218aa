#!/usr/bin/env python3
"""Black-box tests of the built `ddprun` on one node, with real processes, real signals and
the real PyTorch (1.13 on Debian 12; 2.6 and 2.14 in Debian chroots, through
scripts/python-torch26 and scripts/python-torch214: ctest's integration26.* and
integration214.* run the every-tier tests with those interpreters).

    ddprun_test.py <path to ddprun> <test name>     (ctest runs one test per process)
    ddprun_test.py - --list                        (CMake registers the tests from it)

Workers run under PYTHON_EXEC=$DDPRUN_TEST_PYTHON. Tests that need torch exit 77 (ctest's
SKIP_RETURN_CODE) when that interpreter has no torch. The harness (registry, check/poll,
processes, ports, cleanup) is tests/support/blackbox.py, shared with the multinode suite.
"""
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))
import blackbox  # noqa: E402
from blackbox import PYTHON, check, poll, read_text, torch_version  # noqa: E402

WORKERS = os.path.join(HERE, "workers")
EXAMPLES = os.path.join(REPO, "examples")
suite = blackbox.Suite(__doc__)
test = suite.test


class Job(blackbox.Workspace):
    """A temporary directory, an environment, and ways to run ddprun in them."""

    def __init__(self, ddprun):
        super().__init__(ddprun, "ddprun_it_")
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)
        self.token = "ddprun-it-token-" + os.path.basename(self.dir)
        self.env = blackbox.job_environment(TMPDIR=self.dir)

    def probe(self, *modes):
        return [os.path.join(WORKERS, "probe.py"), self.out, self.token, *modes]

    def run(self, args, timeout=120, env=None):
        return self.run_process([self.ddprun, *args], dict(self.env, **(env or {})), timeout)

    def start(self, args, env=None, log=None):
        return self.start_process([self.ddprun, *args], dict(self.env, **(env or {})), log=log)

    def envs(self):
        out = {}
        for name in os.listdir(self.out):
            if name.startswith("env.") and name.endswith(".json"):
                with open(os.path.join(self.out, name)) as f:
                    d = json.load(f)
                out[int(d["env"]["RANK"])] = d
        return out

    def pids(self):
        path = os.path.join(self.out, "pids")
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            return dict(line.split() for line in f if line.strip())

    def job_processes(self):
        """Live processes whose command line carries this job's token or output dir."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and (self.token in cmd or self.out in cmd):
                found.append((int(pid), cmd.replace("\0", " ")))
        return found

    def close(self):
        for pid, _ in self.job_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        super().close()


# ---------------------------------------------------------------------------------------
# Real PyTorch DDP


def ddp_job(job, nproc):
    ckpt = os.path.join(job.dir, "ckpt")
    rc, out, err = job.run(["--standalone", f"--nproc-per-node={nproc}",
                            os.path.join(EXAMPLES, "ddp_train.py"), "--epochs", "2",
                            "--samples", "1024", "--out-dir", ckpt], timeout=240)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    check(f"training on {nproc} workers" in out, "rank 0's banner missing", out)
    # CUDA (one GPU per local rank, NCCL) when the workers' torch has it, else CPU/gloo.
    check(" on cpu with gloo" in out or " on cuda:0 with nccl" in out, "device/backend", out)
    check("epoch 1: loss" in out, "per-epoch loss missing", out)
    check("replicas identical: True" in out, "replicas differ", out, err)
    check(os.path.exists(os.path.join(ckpt, "checkpoint.pt")), "no checkpoint")
    check("OMP_NUM_THREADS" in err, "torchrun's OMP_NUM_THREADS notice missing", err)


# One tier (1.13): ddp_four_workers runs the same job, with more workers, on every tier.
@test(needs_torch=True)
def ddp_two_workers(job):
    ddp_job(job, 2)


@test(every_tier=True)
def ddp_four_workers(job):
    ddp_job(job, 4)


@test(needs_torch=True)
def legacy_local_rank(job):
    rc, out, err = job.run(["--legacy-launch", "--nproc_per_node=2",
                            os.path.join(EXAMPLES, "legacy_local_rank.py"), "--steps", "2"])
    check(rc == 0, f"ddprun exited {rc}", out, err)
    for r in (0, 1):
        check(f"local_rank={r} rank={r} same_as_rank0=True" in out, f"rank {r} line", out, err)


@test(tiers=("113", "214"))
def restart_resets_store(job):
    rc, out, err = job.run(["--nproc-per-node=2", "--max-restarts=1",
                            os.path.join(WORKERS, "store_restart.py"), job.out], timeout=180)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    check("restarting (1/1 restarts)" in err, "restart not logged", err)
    for r in (0, 1):
        path = os.path.join(job.out, f"attempt1.{r}")
        check(os.path.exists(path), f"rank {r} did not finish attempt 1", out, err)
        with open(path) as f:
            text = f.read().strip()
        check(text == "stale= same_grad=True", f"rank {r} saw '{text}'")


@test(every_tier=True)
def failure_report_with_traceback(job):
    rc, out, err = job.run(["--nproc-per-node=2", os.path.join(EXAMPLES, "failing_worker.py"),
                            "--fail-rank", "1"])
    check(rc == 1, f"ddprun exited {rc}, expected 1", out, err)
    lines = err.splitlines()
    check("failing_worker.py FAILED" in err, "title missing", err)
    check("Root Cause (first observed failure):" in lines, "root cause header missing", err)
    check("  rank      : 1 (local_rank: 1)" in lines, "root cause rank", err)
    check(any(l.startswith("  exitcode  : 1 (pid: ") for l in lines), "exitcode line", err)
    # torchrun 2.14's text byte for byte (issue 31 item 10): the exit code's trailing space,
    # its traceback's last line before the report, its error log line.
    check(any(re.fullmatch(r"  exitcode  : 1 \(pid: \d+\) ", l) for l in lines),
          "2.14's exitcode line", err)
    title = next(i for i, l in enumerate(lines) if l.endswith("failing_worker.py FAILED"))
    check(lines[title - 2] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
          "ChildFailedError line before the report", err)
    check(any(re.fullmatch(r"\[ddprun\] error: failed \(exitcode: 1\) local_rank: 1 "
                           r"\(pid: \d+\) of binary: \S*python\S*", l) for l in lines),
          "torchrun's failed (exitcode: ...) log line", err)
    check("  ValueError: rank 1 failed on purpose (attempt 0)" in lines, "traceback", err)
    root = lines[lines.index("Root Cause (first observed failure):"):]
    ef = [l for l in root if l.startswith("  error_file: ")]
    # Read for the report (the traceback above), and kept with the default log dir after
    # a failure, as torchrun keeps it (issue 31 11b): the path the report names is there.
    check(ef and ef[0].endswith("/attempt_0/1/error.json") and
          "rank 1 failed on purpose" in read_text(ef[0][14:]), "error_file", err)
    check("=" * 60 in lines, "border", err)


@test(every_tier=True)
def torchrun_environment(job):
    """Debian's own torchrun of PYTHON's PyTorch (1.13, or 2.6 through bench/torchrun26.py)
    and ddprun start the probe with the same flags: ddprun sets every variable torchrun
    sets, with the same value where it is deterministic."""
    major = int(torch_version().split(".")[0])
    shim = os.path.join(REPO, "bench", "torchrun26.py" if major >= 2 else "torchrun_py311.py")
    # Where the agent hosts the store (as torchrun does): USE_LIBUV=0 would change that.
    env = {k: v for k, v in job.env.items() if k != "USE_LIBUV"}
    # 1.13's torchrun only knows the underscore spellings.
    flags = ["--nnodes=1", "--nproc_per_node=2", "--max_restarts=1", "--rdzv_id=cmp",
             "--master_addr=127.0.0.1"]
    # torchrun runs its workers with its own interpreter (the chroot's, for 2.6).
    torchrun_env = {k: v for k, v in env.items() if k != "PYTHON_EXEC"}
    seen = {}
    for name, argv, e in (("torchrun", [PYTHON, shim], torchrun_env),
                          ("ddprun", [job.ddprun], env)):
        shutil.rmtree(job.out)
        os.mkdir(job.out)
        rc, out, err = job.run_process(
            [*argv, *flags, f"--master_port={job.reserve_port()}", *job.probe()], e, 120)
        check(rc == 0, f"{name} exited {rc}", out, err)
        seen[name] = job.envs()
        check(sorted(seen[name]) == [0, 1], f"{name}: ranks {sorted(seen[name])}", err)
    variable = {"MASTER_PORT", "TORCHELASTIC_ERROR_FILE"}  # ports and temporary paths
    for r in (0, 1):
        t, d = seen["torchrun"][r]["env"], seen["ddprun"][r]["env"]
        added = sorted(k for k in t if torchrun_env.get(k) != t[k])
        check(added, "torchrun set no variable?")
        missing = [k for k in added if k not in d]
        check(not missing, f"rank {r}: ddprun does not set {missing} (torchrun does)")
        differ = {k: (t[k], d[k]) for k in added if k not in variable and t[k] != d[k]}
        check(not differ, f"rank {r}: torchrun vs ddprun values differ: {differ}")
        # The NCCL async-error variable: the name that version's torchrun sets, no other
        # (2.2+ warns about the old one). The 2.6 tier's interpreter is a chroot wrapper:
        # ddprun asks it (torch_version.h).
        names = [{k for k in e if k.endswith("NCCL_ASYNC_ERROR_HANDLING")} for e in (t, d)]
        check(names[0] == names[1], f"rank {r}: NCCL async-error names {names}")
        for e in (t, d):
            check(e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{r}/error.json"),
                  f"error file {e['TORCHELASTIC_ERROR_FILE']}")
    print(f"torchrun {torch_version()} sets: {' '.join(added)}")


@test(needs_torch=True)
def run_path_records_uncaught_exception(job):
    """torchrun --run-path runs the script under @record; ddprun's bootstrap must too,
    without changing what the script sees (argv, sys.path[0], __name__, __file__)."""
    script = os.path.join(job.dir, "plain_fail.py")
    with open(script, "w") as f:
        f.write(
            "import json, os, sys\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group('gloo')\n"
            f"with open(os.path.join({job.out!r}, 'seen%s.json' % dist.get_rank()), 'w') as f:\n"
            "    json.dump({'argv': sys.argv, 'path0': sys.path[0], 'name': __name__,\n"
            "               'file': __file__}, f)\n"
            "def inner():\n"
            "    raise KeyError('rank %d has no record decorator' % dist.get_rank())\n"
            "if dist.get_rank() == 1:\n"
            "    inner()\n"
            "dist.barrier()\n")
    for run_path in (True, False):
        args = ["--nproc-per-node=2", *(["--run-path"] if run_path else []), script, "a1"]
        rc, out, err = job.run(args)
        check(rc == 1, f"{args}: ddprun exited {rc}, expected 1", out, err)
        lines = err.splitlines()
        check("  rank      : 1 (local_rank: 1)" in lines, "root cause rank", err)
        # --run-path: from the error file; without: from stderr (no error file).
        check("  KeyError: 'rank 1 has no record decorator'" in lines,
              f"{args}: traceback in the report", err)
        recorded = any(l.startswith("  error_file: /") for l in lines)
        check(recorded == run_path, f"{args}: error file in the report: {recorded}", err)
        if run_path:
            check(any("in inner" in l for l in lines), "the script's frames", err)
            check(not any("runpy" in l for l in lines[lines.index("Root Cause (first observed failure):"):]),
                  "bootstrap frames trimmed", err)
        # What `python script a1` gives, either way.
        with open(os.path.join(job.out, "seen0.json")) as f:
            seen = json.load(f)
        check(seen == {"argv": [script, "a1"], "path0": job.dir, "name": "__main__",
                       "file": script}, f"{args}: the script saw {seen}")
        # Python's own traceback still reaches stderr, and the exit code is Python's.
        check("KeyError: 'rank 1 has no record decorator'" in err, "stderr traceback", err)


@test()
def failure_report_plain_script_traceback(job):
    """A plain script (no @record, so no error file) that raises: the report shows its
    traceback, chain included, taken from its stderr, whatever -r/-t say; ddprun's own
    error file gets it in @record's fields."""
    unique = "boom-" + os.path.basename(job.dir)
    script = os.path.join(job.dir, "plain_raise.py")
    with open(script, "w") as f:
        f.write("import os, sys, time\n"
                "def fail():\n"
                f"    raise ValueError({unique!r})\n"
                "if os.environ['RANK'] == '1':\n"
                "    print('rank 1 is about to fail', file=sys.stderr)\n"
                "    try:\n"
                "        {}['k']\n"
                "    except KeyError:\n"
                "        fail()\n"
                "time.sleep(120)\n")
    agent_file = os.path.join(job.dir, "agent_error.json")
    for extra in ([], ["--redirects", "3"], ["--tee", "2"], ["--log-dir", "/dev/null", "-r", "2"]):
        args = ["--nproc-per-node=2", *extra, script]
        rc, out, err = job.run(args, env={"TORCHELASTIC_ERROR_FILE": agent_file})
        check(rc == 1, f"{args}: ddprun exited {rc}, expected 1", out, err)
        lines = err.splitlines()
        check("Root Cause (first observed failure):" in lines, f"{args}: no report", err)
        root = lines[lines.index("Root Cause (first observed failure):"):]
        others = lines[lines.index("Failures:"):lines.index("Root Cause (first observed failure):")]
        check("  rank      : 0 (local_rank: 0)" in others and
              any(re.fullmatch(r"  exitcode  : -15 \(pid: \d+\)  \(SIGTERM\)", l)
                  for l in others),
              f"{args}: rank 0, stopped by the agent, listed with -15 (torchrun 2.x)", err)
        check("  rank      : 1 (local_rank: 1)" in root, f"{args}: root cause rank", err)
        check(any(l.startswith("  exitcode  : 1 (pid: ") for l in root), f"{args}: exitcode", err)
        check("  error_file: <N/A>" in root, f"{args}: error_file", err)
        check("  traceback : Traceback (most recent call last):" in root, f"{args}: header", err)
        check(f'    File "{script}", line 3, in fail' in root, f"{args}: the script's line", err)
        check(f"  ValueError: {unique}" in root, f"{args}: the exception", err)
        check("  KeyError: 'k'" in root, f"{args}: the chained exception", err)
        check("To enable traceback" not in err, f"{args}: torchrun's hint", err)
        if "/dev/null" in extra:
            # As torchrun: no log files, so -r is ignored: the console and the report.
            check(err.count(f"ValueError: {unique}") == 2, f"{args}: on the console", err)
        elif "--redirects" in extra or "-r" in extra:
            # Only the report shows it: rank 1's stderr went to its file alone.
            check(err.count(f"ValueError: {unique}") == 1, f"{args}: on the console", err)
        with open(agent_file) as f:
            data = json.load(f)["message"]
        check(data["message"] == f"ValueError: {unique}" and data["errorCode"] == 1,
              f"{args}: agent error file", json.dumps(data))
        check(data["extraInfo"]["py_callstack"].startswith("Traceback (most recent call last):\n")
              and f'File "{script}", line 7, in <module>' in data["extraInfo"]["py_callstack"],
              f"{args}: agent error file's py_callstack", json.dumps(data))


@test(needs_torch=True)
def agent_error_file_copy(job):
    agent_file = os.path.join(job.dir, "agent_error.json")
    rc, out, err = job.run(["--nproc-per-node=1", os.path.join(EXAMPLES, "failing_worker.py"),
                            "--fail-rank", "0"], env={"TORCHELASTIC_ERROR_FILE": agent_file})
    check(rc == 1, f"ddprun exited {rc}", out, err)
    with open(agent_file) as f:
        data = json.load(f)
    check(data["message"]["errorCode"] == 1, "errorCode", json.dumps(data))
    check("ValueError" in data["message"]["message"], "message", json.dumps(data))


@test()
def hostile_error_files(job):
    """A worker leaves a FIFO, a symlink to /dev/zero or a 50 MB file at its
    TORCHELASTIC_ERROR_FILE: the report comes at once, saying why the file was not read,
    without hanging in open() or reading without bound (issue 31 item 16)."""
    makers = {"fifo": 'mkfifo "$TORCHELASTIC_ERROR_FILE"',
              "zero": 'ln -s /dev/zero "$TORCHELASTIC_ERROR_FILE"',
              "big": 'head -c 50000000 /dev/zero | tr "\\0" x > "$TORCHELASTIC_ERROR_FILE"'}
    for name, make in makers.items():
        t0 = time.monotonic()
        rc, out, err = job.run(["--nproc-per-node=1", "--no-python", "sh", "-c",
                                f"{make}; exit 1", job.token], timeout=60)
        took = time.monotonic() - t0
        check(rc == 1, f"{name}: ddprun exited {rc}", out, err)
        why = "larger than 4 MiB" if name == "big" else "not a regular file"
        check(f"<error file not readable: {why}" in err, f"{name}: the report says why", err)
        check(took < 30, f"{name}: took {took:.1f} s", err)


# ---------------------------------------------------------------------------------------
# Environment, command line, exit codes (no torch needed: the probe is plain Python)


@test()
def worker_environment(job):
    rc, out, err = job.run(["--nproc-per-node=3", "--max-restarts=2", "--rdzv-id=envjob",
                            "--master-port=0", *job.probe(), "a${local_rank}b", "--x"],
                           env={"NCCL_ASYNC_ERROR_HANDLING": "7", "OMP_NUM_THREADS": "2"})
    check(rc == 0, f"ddprun exited {rc}", out, err)
    envs = job.envs()
    check(sorted(envs) == [0, 1, 2], f"ranks {sorted(envs)}")
    ports = {d["env"]["MASTER_PORT"] for d in envs.values()}
    check(len(ports) == 1 and int(ports.pop()) > 0, "one MASTER_PORT, bound by the agent")
    for r, d in envs.items():
        e = d["env"]
        expected = {
            "RANK": str(r), "LOCAL_RANK": str(r), "GROUP_RANK": "0", "ROLE_RANK": str(r),
            "ROLE_NAME": "default", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3",
            "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "2",
            "TORCHELASTIC_RUN_ID": "envjob", "TORCHELASTIC_USE_AGENT_STORE": "True",
            "NCCL_ASYNC_ERROR_HANDLING": "7",
            "OMP_NUM_THREADS": "2", "TMPDIR": job.dir,
        }
        for k, v in expected.items():
            check(e.get(k) == v, f"rank {r}: {k}={e.get(k)!r}, expected {v!r}")
        check(e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{r}/error.json"), "error file")
        # In the default log directory, which ddprun removes at the end (issue 14).
        check(e["TORCHELASTIC_ERROR_FILE"].startswith(os.path.join(job.dir, "torchelastic_")),
              "error file in the default log dir")
        check(not os.path.exists(os.path.dirname(e["TORCHELASTIC_ERROR_FILE"])),
              "default log dir removed")
        check(d["argv"][-2:] == [f"a{r}b", "--x"], f"argv {d['argv']}")
        check(d["pgid"] == d["pid"] and d["sid"] == d["pid"], "worker is its own session")
    check("OMP_NUM_THREADS" not in err, "no OMP notice when the user set it", err)


@test()
def bracketed_ipv6_master_addr_and_stale_tmpdir(job):
    """--master-addr '[::1]' (the form torchrun's --help suggests) gives the workers
    MASTER_ADDR=::1, as torchrun; a TMPDIR that is gone falls back to /tmp (torchrun's
    tempfile.gettempdir())."""
    port = job.reserve_port("::1")
    rc, out, err = job.run(["--nproc-per-node=1", "--master-addr", "[::1]",
                            f"--master-port={port}", *job.probe()], timeout=60)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    check(job.envs()[0]["env"]["MASTER_ADDR"] == "::1", "MASTER_ADDR without brackets",
          str(job.envs()[0]["env"].get("MASTER_ADDR")))
    gone = os.path.join(job.dir, "gone")
    rc, out, err = job.run(["--nproc-per-node=1", *job.probe()], env={"TMPDIR": gone},
                           timeout=60)
    check(rc == 0, f"stale TMPDIR: ddprun exited {rc}", out, err)


@test(every_tier=True)
def nccl_variable_for_the_workers_torch(job):
    """Workers get the NCCL async-error variable under the name their torch reads, as that
    version's torchrun: NCCL_* for 1.13-2.1, TORCH_NCCL_* for 2.2+ (which warns about the
    old one), also when the interpreter is a wrapper script (a pyenv shim) that ddprun must
    ask. A user's own value is kept."""
    major, minor = (int(x) for x in torch_version().split(".")[:2])
    want = {"TORCH_NCCL_ASYNC_ERROR_HANDLING"} if (major, minor) >= (2, 2) else \
        {"NCCL_ASYNC_ERROR_HANDLING"}
    shim = os.path.join(job.dir, "shims", "python3")
    os.makedirs(os.path.dirname(shim))
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\nexec {os.path.abspath(PYTHON)} "$@"\n')
    os.chmod(shim, 0o755)
    for python in (PYTHON, shim):
        shutil.rmtree(job.out)
        os.mkdir(job.out)
        rc, out, err = job.run(["--nproc-per-node=1", *job.probe()], env={"PYTHON_EXEC": python})
        check(rc == 0, f"{python}: ddprun exited {rc}", out, err)
        e = job.envs()[0]["env"]
        got = {k for k in e if k.endswith("NCCL_ASYNC_ERROR_HANDLING")}
        check(got == want, f"{python}: torch {major}.{minor} got {sorted(got)}, want {want}")
        check(all(e[k] == "1" for k in got), f"{python}: values {e}")


@test()
def use_libuv_0_lets_worker_rank_0_host_the_store(job):
    """USE_LIBUV=0 (PyTorch built without libuv): ddprun hosts no workers' store; workers
    get TORCHELASTIC_USE_AGENT_STORE=False and a free MASTER_PORT; the rdzv-conf key wins."""
    import socket
    rc, out, err = job.run(["--nproc-per-node=2", *job.probe()], env={"USE_LIBUV": "0"})
    check(rc == 0, f"ddprun exited {rc}", out, err)
    envs = job.envs()
    check(sorted(envs) == [0, 1], f"ranks {sorted(envs)}", err)
    for r, d in envs.items():
        v = d["env"]["TORCHELASTIC_USE_AGENT_STORE"]
        check(v == "False", f"rank {r}: TORCHELASTIC_USE_AGENT_STORE={v}, expected False")
        check(d["env"]["USE_LIBUV"] == "0", "USE_LIBUV passed on")
    port = int(envs[0]["env"]["MASTER_PORT"])
    check(port > 0 and envs[1]["env"]["MASTER_PORT"] == str(port), "one MASTER_PORT")
    # The port was free for worker rank 0: while the workers ran, nothing listened there.
    shutil.rmtree(job.out)
    os.mkdir(job.out)
    p = job.start(["--nproc-per-node=1", *job.probe("sleep")], env={"USE_LIBUV": "0"})
    try:
        def started():
            try:
                return 0 in job.envs()
            except ValueError:  # being written
                return False
        poll(started, 60, "the sleeping worker")
        sleeping_port = int(job.envs()[0]["env"]["MASTER_PORT"])
        with socket.socket() as s:
            check(s.connect_ex(("127.0.0.1", sleeping_port)) != 0,
                  f"something listens on MASTER_PORT {sleeping_port}: ddprun hosted a store")
    finally:
        p.kill()
        p.communicate()
    shutil.rmtree(job.out)
    os.mkdir(job.out)
    rc, out, err = job.run(["--nproc-per-node=1", "--rdzv-conf=use_agent_store=1",
                            *job.probe()], env={"USE_LIBUV": "0"})
    check(rc == 0 and job.envs()[0]["env"]["TORCHELASTIC_USE_AGENT_STORE"] == "True",
          "--rdzv-conf use_agent_store=1 keeps ddprun's store", err)


@test()
def pet_environment_and_spellings(job):
    def ranks(args, env=None):
        shutil.rmtree(job.out)
        os.mkdir(job.out)
        rc, out, err = job.run([*args, *job.probe()], env=env)
        check(rc == 0, f"{args} {env}: exit {rc}", err)
        return sorted(job.envs())
    check(ranks([], {"PET_NPROC_PER_NODE": "2"}) == [0, 1], "PET_NPROC_PER_NODE")
    check(ranks(["--nproc_per_node=3"], {"PET_NPROC_PER_NODE": "2"}) == [0, 1, 2],
          "the command line wins over PET_")
    check(ranks(["--nproc-per-node", "1"]) == [0], "dash spelling, separate value")
    check(ranks(["--nproc-per-node=cpu"]) == list(range(os.cpu_count())), "cpu")
    rc, out, err = job.run(["--nproc-per-node=gpu", *job.probe()], env={"CUDA_VISIBLE_DEVICES": ""})
    check(rc == 2 and "--nproc-per-node=gpu" in err, "gpu without visible GPUs", err)
    check(ranks(["--max-restarts=0"], {"PET_MAX_RESTARTS": "4", "PET_RDZV_ID": "petjob"})
          == [0], "flags")
    e = job.envs()[0]["env"]
    check(e["TORCHELASTIC_MAX_RESTARTS"] == "0" and e["TORCHELASTIC_RUN_ID"] == "petjob",
          "PET_RDZV_ID used, --max-restarts wins", json.dumps(e))


@test()
def module_and_legacy_arguments(job):
    with open(os.path.join(job.dir, "ddprun_it_mod.py"), "w") as f:
        f.write("import os, sys\nprint('mod', os.environ['LOCAL_RANK'], sys.argv[1:])\n")
    rc, out, err = job.run(["--nproc-per-node=2", "-m", "ddprun_it_mod", "x${local_rank}"])
    check(rc == 0, f"-m: exit {rc}", err)
    check(sorted(out.splitlines()) == ["mod 0 ['x0']", "mod 1 ['x1']"], "-m output", out)
    rc, out, err = job.run(["--legacy-launch", "--nproc-per-node=2", "-m", "ddprun_it_mod", "y"])
    check(sorted(out.splitlines()) == ["mod 0 ['--local_rank=0', 'y']",
                                       "mod 1 ['--local_rank=1', 'y']"], "--legacy-launch", out)


@test()
def exit_codes(job):
    rc, out, err = job.run(["--nproc-per-node=2", *job.probe()])
    check(rc == 0, f"success gave {rc}", err)
    rc, out, err = job.run(["--nproc-per-node=2", *job.probe("rank=1", "exit=3")])
    check(rc == 1, f"a worker exiting 3 gave {rc}, expected 1", err)
    check("  exitcode  : 3 (pid: " in err and "To enable traceback see:" in err, "report", err)
    check("  error_file: <N/A>" in err, "no error file", err)
    # "$$$$": script arguments are expanded as torchrun does, where "$$" stands for "$".
    rc, out, err = job.run(["--nproc-per-node=1", "--no-python", "sh", "-c", "kill -9 $$$$"])
    check(rc == 1, f"a SIGKILLed worker gave {rc}", err)
    check("  exitcode  : -9 (pid: " in err, "negative signal exit code", err)
    check("Signal 9 (SIGKILL) received by PID" in err, "signal message", err)
    check("OOM killer" in err, "SIGKILL hint", err)
    rc, out, err = job.run(["--no-python", "definitely-not-a-program-xyz"])
    check(rc == 1, f"exec failure gave {rc}", err)
    check("definitely-not-a-program-xyz" in err, "exec failure names the program", err)


@test()
def restart_count_increments(job):
    rc, out, err = job.run(["--nproc-per-node=2", "--max-restarts=3",
                            *job.probe("rank=1", "fail-first")])
    check(rc == 0, f"ddprun exited {rc}", out, err)
    envs = job.envs()  # the last attempt's dump wins
    for r in (0, 1):
        check(envs[r]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1", "restart count", err)
        check("/attempt_1/" in envs[r]["env"]["TORCHELASTIC_ERROR_FILE"], "attempt dir")
    rc, out, err = job.run(["--nproc-per-node=1", *job.probe("exit=5")])
    check(rc == 1, "no restarts left", err)


@test()
def bad_command_lines(job):
    marker_script = os.path.join(job.dir, "touch.py")
    with open(marker_script, "w") as f:
        f.write(f"open({os.path.join(job.out, 'spawned')!r}, 'w').close()\n")
    cases = [
        (["--bogus-flag", marker_script], "--bogus-flag"),
        (["--nnodes=0", marker_script], "--nnodes"),
        (["--nnodes=3:2", marker_script], "--nnodes"),
        (["--nproc-per-node=many", marker_script], "--nproc-per-node"),
        (["--max-restarts=-1", marker_script], "--max-restarts"),
        (["--rdzv-conf=a=1,broken", marker_script], "broken"),
        (["--numa-binding=", marker_script], "--numa-binding: invalid choice ''"),
        ([], "training_script"),
        ([os.path.join(job.dir, "nope.py")], "nope.py"),
        (["--no-python", "-m", marker_script], "--no-python"),
        (["--nproc-per-node"], "--nproc-per-node"),
        (["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=[::1", marker_script],
         "--rdzv-endpoint"),
        (["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=:::::", marker_script],
         "':::::' is invalid"),
        (["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=::1:99999", marker_script],
         "--rdzv-endpoint"),
        (["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1",
          "--rdzv-conf=read_timeout=0", marker_script], "read_timeout='0'"),
        (["--virtual-local-rank", "--nproc-per-node=3", marker_script],
         "CUDA_VISIBLE_DEVICES='5,7' lists 2", {"CUDA_VISIBLE_DEVICES": "5,7"}),
    ]
    for args, needle, *env in cases:
        rc, out, err = job.run(args, timeout=30, env=env[0] if env else None)
        lines = err.splitlines()
        check(rc == 2, f"{args}: exit {rc}, expected 2", err)
        check(len(lines) == 2 and lines[0].startswith("ddprun: error: ") and needle in lines[0],
              f"{args}: expected one error line naming {needle}", err)
        check("usage:" in lines[1], f"{args}: usage hint", err)
        check(out == "", f"{args}: nothing on stdout", out)
    rc, out, err = job.run(["--help"], timeout=30)
    check(rc == 0 and "--nproc-per-node" in out and "--rdzv-endpoint" in out, "--help", out)
    check(all(b in out for b in ("static", "c10d", "etcd-v3", "etcd-v2")), "--help: backends", out)
    check(not os.path.exists(os.path.join(job.out, "spawned")), "a worker was spawned")
    # Script arguments that look like ddprun options are the script's.
    rc, out, err = job.run([marker_script, "--nnodes=0", "--bogus"], timeout=60)
    check(rc == 0, f"options after the script were parsed by ddprun ({rc})", err)


@test()
def unimplemented_options_refused(job):
    """torchrun's options ddprun does not implement start nothing when given a value that
    would need them: one error line naming the alternative, exit 2; their no-op values
    run the job."""
    script = os.path.join(job.dir, "ok.py")
    with open(script, "w") as f:
        f.write("print('ran')\n")
    for arg, instead in (("--logs-specs=x", "--log-dir"),
                         ("--event-log-handler=scuba", "console, null")):
        rc, out, err = job.run(["--nproc-per-node=2", arg, script], timeout=60)
        lines = err.splitlines()
        check(rc == 2 and "ran" not in out, f"{arg}: exit {rc}", out, err)
        check(len(lines) == 2 and arg in lines[0] and instead in lines[0],
              f"{arg}: one line naming {instead}", err)
    rc, out, err = job.run(["--event-log-handler=null", "--logs-specs=", script], timeout=60)
    check(rc == 0 and "ran" in out and "ignoring" not in err, "no-op values run", out, err)


@test()
def duplicate_filters_copy_teed_lines(job):
    """torchrun 2.11's --duplicate-stdout/stderr-filters: the tee'd lines of every rank that
    contain any filter go, prefixed as on the console, to attempt_0/filtered_std*.log;
    other lines and ranks that are not tee'd do not; ',,' is a comma inside a filter."""
    logs = os.path.join(job.dir, "logs")
    rc, out, err = job.run(["--nproc-per-node=2", "--log-dir", logs, "--tee=0:3,1:1",
                            "--duplicate-stdout-filters=apple,,pie,orange",
                            "--duplicate-stderr-filters=err:banana",
                            *job.probe("print=apple,pie", "print=banana", "print=orange")],
                           timeout=60)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    (run,) = os.listdir(logs)
    attempt = os.path.join(logs, run, "attempt_0")
    got = read_text(os.path.join(attempt, "filtered_stdout.log")).splitlines()
    want = [f"[default{r}]:{t}" for r in (0, 1) for t in ("apple,pie", "orange")]
    check(sorted(got) == sorted(want), f"filtered_stdout.log: {got}", out)
    # Only rank 0 tees stderr.
    got = read_text(os.path.join(attempt, "filtered_stderr.log")).splitlines()
    check(got == ["[default0]:err:banana"], f"filtered_stderr.log: {got}", err)


@test()
def tee_redirect_and_log_dir(job):
    logs = os.path.join(job.dir, "logs")
    rc, out, err = job.run(["--nproc-per-node=2", "--log-dir", logs, "--tee=3",
                            "--redirects=0:0,1:1", *job.probe("print=hello")])
    check(rc == 0, f"ddprun exited {rc}", err)
    out_lines, err_lines = out.splitlines(), err.splitlines()
    check("[default0]:hello" in out_lines and "[default1]:hello" in out_lines, "tee stdout", out)
    check("[default0]:err:hello" in err_lines, "tee stderr", err)
    runs = os.listdir(logs)
    check(len(runs) == 1, f"one run dir, got {runs}")
    check(all(r.startswith(job.envs()[0]["env"]["TORCHELASTIC_RUN_ID"] + "_") for r in runs),
          "run dir named <run_id>_*", str(runs))
    base = os.path.join(logs, runs[0], "attempt_0")
    for r in (0, 1):
        with open(os.path.join(base, str(r), "stdout.log")) as f:
            check(f.read() == "hello\n", f"rank {r} stdout.log is unprefixed")
        with open(os.path.join(base, str(r), "stderr.log")) as f:
            check(f.read() == "err:hello\n", f"rank {r} stderr.log")

    rc, out, err = job.run(["--nproc-per-node=2", "--log-dir", logs, "-r", "1",
                            *job.probe("print=quiet")])
    check(rc == 0 and "quiet" not in out, "redirected stdout stays off the console", out)
    check(err.count("err:quiet") == 2, "stderr not redirected", err)
    # --log-dir /dev/null: no files, so (as torchrun) -r/-t change nothing: all is printed.
    for streams in (["-t", "3"], ["-r", "3"], ["-r", "1", "--local-ranks-filter", "1"]):
        rc, out, err = job.run(["--nproc-per-node=1", "--log-dir", "/dev/null", *streams,
                                *job.probe("print=devnull")])
        check(rc == 0 and out.splitlines() == ["devnull"] and "err:devnull" in err,
              f"--log-dir /dev/null {streams}: printed as it is", out, err)
    rc, out, err = job.run(["--nproc-per-node=1", "-t", "1", *job.probe("print=tpl")],
                           env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name}:${rank}>"})
    check("<default:0>tpl" in out.splitlines(), "prefix template", out)
    # torchrun 2.14's option and its PET_ form win over the variable; safe_substitute.
    host = socket.gethostname()
    for how in (["--log-line-prefix-template", "$hostname:$rank$$ ${x} "], []):
        env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<env>"}
        if not how:
            env["PET_LOG_LINE_PREFIX_TEMPLATE"] = "$hostname:$rank$$ ${x} "
        rc, out, err = job.run(["--nproc-per-node=1", "-t", "1", *how, *job.probe("print=tpl")],
                               env=env)
        check(f"{host}:0$ ${{x}} tpl" in out.splitlines(), f"prefix template option {how}", out)


@test()
def print_completion(job):
    """--print-completion (torchrun 2.14): the bash and zsh scripts the build generated."""
    rc, out, err = job.run(["--print-completion", "bash"], timeout=30)
    check(rc == 0 and "complete -F _ddprun ddprun" in out, "bash completion printed", out, err)
    rc, out, err = job.run(["--print_completion=zsh"], timeout=30)
    check(rc == 0 and out.startswith("#compdef ddprun"), "zsh completion printed", out, err)
    rc, out, err = job.run(["--print-completion", "fish"], timeout=30)
    check(rc == 2 and "--print-completion" in err, "an unknown shell is a usage error", err)


@test()
def event_log_handler_console(job):
    """--event-log-handler console: torchrun's JSON event lines on stderr; null: none."""
    def events(err):
        return [json.loads(line) for line in err.splitlines()
                if line.startswith('{"name": "torchelastic.worker.status.')]
    rc, out, err = job.run(["--nproc-per-node=2", "--event-log-handler", "console",
                            *job.probe("print=ev")])
    got = [(e["source"], e["metadata"]["state"], e["metadata"]["global_rank"])
           for e in events(err)]
    want = [("AGENT", "RENDEZVOUS", None), ("AGENT", "ASSIGN_WORKER_RANKS", None),
            ("WORKER", "START", 0), ("WORKER", "START", 1), ("WORKER", "SUCCEEDED", 0),
            ("WORKER", "SUCCEEDED", 1), ("AGENT", "SUCCEEDED", None)]
    check(rc == 0 and got == want, f"console events {got}", err)
    rc, out, err = job.run(["--nproc-per-node=1", "--event-log-handler", "null",
                            *job.probe("print=ev")])
    check(rc == 0 and not events(err), "null prints no event", err)


@test()
def python_without_torch_is_named(job):
    """Workers whose python has no torch (a pyenv shim or an env first on PATH): the
    version probe's failure is a warning naming the interpreter, and the failure report's
    hint names it and PYTHON_EXEC (issue 31 item 7)."""
    venv = os.path.join(job.dir, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    py = os.path.join(venv, "bin", "python3")
    script = os.path.join(job.dir, "t.py")
    with open(script, "w") as f:
        f.write("import torch\n")
    rc, out, err = job.run(["--nproc-per-node=1", script], env={"PYTHON_EXEC": py})
    check(rc == 1, f"ddprun exited {rc}", out, err)
    check(f"cannot tell which PyTorch the workers' python {py} (PYTHON_EXEC) has" in err,
          "the probe's failure names the interpreter", err)
    check(f"hint: the workers ran {py} (PYTHON_EXEC), which has no torch: set PYTHON_EXEC"
          in err, "the report's hint", err)


@test()
def uninterruptible_state_timeout_ends_the_group(job):
    """torchrun 2.14's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: a worker in D state (a
    vfork() parent waiting for its child) that long ends the group without a restart;
    unlike torchrun (exit 0), ddprun exits 1 and the report says why (issue 31 item 8)."""
    src = os.path.join(job.dir, "wedge.c")
    exe = os.path.join(job.dir, "wedge")
    with open(src, "w") as f:
        f.write("#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n"
                "int main(void) {\n"
                "  if (strcmp(getenv(\"RANK\"), \"0\") == 0 && vfork() == 0) {\n"
                "    sleep(60); _exit(0);\n"
                "  }\n"
                "  sleep(60);\n"
                "  return 0;\n"
                "}\n")
    subprocess.run(["cc", "-o", exe, src], check=True)
    t0 = time.monotonic()
    rc, out, err = job.run(["--nproc-per-node=2", "--max-restarts=2", "--shutdown-timeout=2",
                            "--no-python", exe, job.token], timeout=50,
                           env={"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT": "2"})
    took = time.monotonic() - t0
    check(rc == 1, f"ddprun exited {rc}", out, err)
    check(took < 30, f"took {took:.1f} s (the D state lasts 60 s)", err)
    check("stuck in uninterruptible sleep (D state)" in err and
          "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=2" in err, "says why", err)
    check("wedge FAILED" in err, "the failure report", err)
    check("restarting" not in err, "no restart", err)


@test()
def endpoint_port_held_without_listening(job):
    """The endpoint's port is bound by a socket that does not listen: ddprun says at once
    why it cannot host the store (`cannot listen ... Address already in use`), not after
    read_timeout as "no agent hosts the rendezvous store" (issue 31 item 19)."""
    import socket
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound, never listening
    port = holder.getsockname()[1]
    try:
        t0 = time.monotonic()
        rc, out, err = job.run(["--nnodes=2", "--rdzv-backend=c10d",
                                f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=held",
                                *job.probe()], timeout=60)
        took = time.monotonic() - t0
    finally:
        holder.close()
    check(rc == 1, f"ddprun exited {rc}", out, err)
    check(f"cannot listen on 127.0.0.1:{port}: Address already in use" in err,
          "the bind's error, at the default log level", err)
    check("no agent hosts" not in err, "not the read_timeout message", err)
    check(took < 20, f"took {took:.1f} s", err)


@test()
def local_ranks_filter(job):
    rc, out, err = job.run(["--nproc-per-node=3", "--local-ranks-filter=1",
                            *job.probe("print=line")])
    check(rc == 0, f"ddprun exited {rc}", err)
    check(out.splitlines() == ["line"], "only rank 1's stdout on the console", out)
    check(err.count("err:line") == 1, "only rank 1's stderr on the console", err)


# ---------------------------------------------------------------------------------------
# Signals and orphans


def start_sleepers(job, extra_args=(), modes=("grandchild", "trap", "sleep"), nproc=2):
    p = job.start(["--nproc-per-node", str(nproc), *extra_args, *job.probe(*modes)])
    poll(lambda: all(os.path.exists(os.path.join(job.out, f"ready.{r}")) for r in range(nproc)),
         60, "workers ready")
    return p


def stop_with(job, signo):
    p = start_sleepers(job, ["--shutdown-timeout=20"])
    p.send_signal(signo)
    out, err = p.communicate(timeout=60)
    name = signal.Signals(signo).name
    check(p.returncode == 1, f"ddprun exited {p.returncode} after {name}, expected 1", err)
    for r in (0, 1):
        check(os.path.exists(os.path.join(job.out, f"got.{r}.{name}")),
              f"worker {r} did not get {name}", err)
    check(name in err, f"the agent does not name {name}", err)
    poll(lambda: not job.job_processes(), 10, "no process of the job left (grandchildren)")


@test()
def sigterm_reaches_workers_and_grandchildren(job):
    stop_with(job, signal.SIGTERM)


@test()
def sigint_reaches_workers_and_grandchildren(job):
    stop_with(job, signal.SIGINT)


@test()
def sigusr1_forwarded_then_workers_stopped(job):
    """torchrun 2.11's --signals-to-handle: a handled SIGUSR1 is forwarded to every worker,
    then the workers are stopped (SIGKILL after --shutdown-timeout for one that keeps
    running) and ddprun exits 1 without restarting; the workers see the list as given in
    TORCHELASTIC_SIGNALS_TO_HANDLE."""
    handled = "SIGTERM,SIGINT,SIGUSR1"
    p = start_sleepers(job, [f"--signals-to-handle={handled}", "--shutdown-timeout=1",
                             "--max-restarts=2"], modes=("usr1-exit", "usr1-note", "sleep"))
    p.send_signal(signal.SIGUSR1)
    t0 = time.monotonic()
    out, err = p.communicate(timeout=60)
    check(p.returncode == 1, f"ddprun exited {p.returncode} after SIGUSR1, expected 1", err)
    check(time.monotonic() - t0 < 15, "stopped within the shutdown timeout", err)
    for r in (0, 1):
        check(os.path.exists(os.path.join(job.out, f"got.{r}.SIGUSR1")), f"worker {r}", err)
    check("stopped by SIGUSR1" in err, "the agent names SIGUSR1", err)
    with open(os.path.join(job.out, "pids")) as f:
        check(len(f.read().split("\n")) == 3, "two workers started, no restart", err)
    for r, e in job.envs().items():
        check(e["env"].get("TORCHELASTIC_SIGNALS_TO_HANDLE") == handled,
              f"rank {r}: TORCHELASTIC_SIGNALS_TO_HANDLE "
              f"{e['env'].get('TORCHELASTIC_SIGNALS_TO_HANDLE')!r}", err)
    poll(lambda: not job.job_processes(), 10, "no process of the job left")


@test()
def kill_9_leaves_no_orphans(job):
    p = start_sleepers(job, modes=("grandchild", "sleep"))
    check(len(job.job_processes()) >= 4, "2 workers and 2 grandchildren running",
          str(job.job_processes()))
    p.kill()
    p.communicate(timeout=30)
    t0 = time.monotonic()
    poll(lambda: not job.job_processes(), 10, "every worker and grandchild gone")
    took = time.monotonic() - t0
    check(took < 5, f"orphans survived {took:.1f} s")
    # As torchrun (issue 31 item 11): the hidden ranks' output goes nowhere, no log file
    # holds it; -t/-r without --log-dir keep the default torchelastic_* directory.
    logs = os.path.join(job.dir, "logs")
    rc, out, err = job.run(["--nproc-per-node=2", "--log-dir", logs, "--local-ranks-filter=1",
                            *job.probe("print=line")])
    check(rc == 0, f"ddprun exited {rc}", err)
    (run,) = os.listdir(logs)
    check(not os.listdir(os.path.join(logs, run, "attempt_0", "0")), "rank 0 wrote no log file")
    for opt in ("-t", "-r"):
        shutil.rmtree(job.out)
        os.mkdir(job.out)
        before = {d for d in os.listdir(job.dir) if d.startswith("torchelastic_")}
        rc, out, err = job.run(["--nproc-per-node=1", opt, "3", *job.probe("print=kept")])
        check(rc == 0, f"{opt}: ddprun exited {rc}", err)
        kept = [d for d in os.listdir(job.dir) if d.startswith("torchelastic_") and d not in before]
        check(len(kept) == 1, f"{opt}: the default log dir is kept: {kept}", err)
        logs_of = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(job.dir, kept[0]))
                   for f in fs if f == "stdout.log"]
        check(len(logs_of) == 1 and read_text(logs_of[0]) == "kept\n", f"{opt}: {logs_of}", err)
        shutil.rmtree(os.path.join(job.dir, kept[0]))


@test()
def closed_std_fds_get_dev_null(job):
    """Started with fds 0-2 closed (`ddprun ... <&- >&- 2>&-`, some daemon wrappers):
    /dev/null takes them first thing, so neither the event loop nor the orphan guard's
    pipe lands there (log lines went into the guard's stream and workers survived
    `kill -9` of ddprun; issue 31 item 18)."""
    def close_std():
        for fd in (0, 1, 2):
            os.close(fd)
    p = subprocess.Popen([job.ddprun, "--nproc-per-node=2", *job.probe("grandchild", "sleep")],
                         env=job.env, cwd=job.dir, preexec_fn=close_std)
    try:
        poll(lambda: all(os.path.exists(os.path.join(job.out, f"ready.{r}")) for r in (0, 1)),
             60, "workers ready")
        fds = {fd: os.readlink(f"/proc/{p.pid}/fd/{fd}") for fd in (0, 1, 2)}
        check(all(t == "/dev/null" for t in fds.values()), f"fds 0-2 of ddprun: {fds}")
        p.kill()
        p.wait(timeout=30)
        poll(lambda: not job.job_processes(), 10, "every worker and grandchild gone")
    finally:
        if p.poll() is None:
            p.kill()


@test()
def second_sigint_cuts_the_grace(job):
    # The workers ignore SIGINT and SIGTERM, so the first SIGINT starts a 60 s grace period
    # and only the second one can end it early (then SIGKILL).
    log = os.path.join(job.dir, "ddprun.log")
    p = job.start(["--nproc-per-node=2", "--shutdown-timeout=60", "--no-python", "sh", "-c",
                   f"trap '' INT TERM; touch {job.out}/ready.$RANK; "
                   f"while :; do sleep 0.2; done; : {job.token}"], log=log)
    poll(lambda: all(os.path.exists(os.path.join(job.out, f"ready.{r}")) for r in (0, 1)),
         60, "workers ready")
    p.send_signal(signal.SIGINT)
    # The agent took the first one (two SIGINTs sent before it reads one would be one).
    poll(lambda: "received SIGINT" in read_text(log), 30, "the agent's stopping line",
         lambda: read_text(log))
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=40)
    except subprocess.TimeoutExpired:
        pass
    err = read_text(log)
    check(p.returncode == 1, f"exit {p.returncode}", err)
    check(time.monotonic() - t0 < 30, "the second SIGINT did not cut the grace period", err)


# ---------------------------------------------------------------------------------------
# Hostile output and the default log directory (issue 14)


def torchelastic_dirs(job):
    return [d for d in os.listdir(job.dir) if d.startswith("torchelastic_")]


@test()
def output_is_byte_exact(job):
    # A 200 KiB line, every byte value (NUL, invalid UTF-8, lone CR), no final newline.
    data = (b"a" * 200 * 1024 + b"\n" + bytes(range(1, 256)) + b"\0mid\0\n"
            + b"last line \xff")
    src = os.path.join(job.dir, "data.bin")
    with open(src, "wb") as f:
        f.write(data)
    logs = os.path.join(job.dir, "logs")
    rc, out, err = job.run_process(
        [job.ddprun, "--nproc-per-node=2", "--log-dir", logs, "--redirects=0:2",
         "--local-ranks-filter=0", "--no-python", "sh", "-c",
         f"cat {src}; cat {src} >&2; : {job.token}"], job.env, 120, text=False)
    check(rc == 0, f"ddprun exited {rc}", err.decode(errors="replace"))
    check(out == data, f"console stdout altered ({len(out)} bytes, want {len(data)})")
    attempt = os.path.join(logs, os.listdir(logs)[0], "attempt_0")
    with open(os.path.join(attempt, "0", "stderr.log"), "rb") as f:
        got = f.read()
    check(got == data, f"rank 0 stderr.log altered ({len(got)} bytes)")
    # Rank 1, filtered off the console and not redirected, goes nowhere (as torchrun).
    check(not os.listdir(os.path.join(attempt, "1")), "rank 1 wrote a log file")


def read_until(fd, want, timeout, buf=b""):
    """Reads `fd` (a pipe or a pty master) into `buf` until `want` is in it; returns
    (buf, the time it came), or fails after `timeout` seconds."""
    deadline = time.time() + timeout
    while want not in buf:
        left = deadline - time.time()
        check(left > 0, f"{want!r} did not come within {timeout} s", buf)
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the pty's other side closed
                chunk = b""
            check(chunk, f"end of output before {want!r}", buf)
            buf += chunk
    return buf, time.time()


@test()
def partial_line_reaches_console(job):
    """Issue 21: a worker writes "prompt> " with no newline and waits: the text reaches
    ddprun's stdout (a pipe) within 100 ms under its --tee prefix; another worker's line
    starts on a new line, and the prompt's line, ended later, resumes under its prefix
    (once: no prefix is doubled without another line in between)."""
    worker = os.path.join(WORKERS, "prompt.py")
    p = job.start(["--nproc-per-node=2", "--tee=3", worker, job.out, "wait"])
    out, came = read_until(p.stdout.fileno(), b"[default0]:prompt> ", 60)
    wrote = read_time(os.path.join(job.out, "wrote"))
    check(came - wrote < 0.1, f"the prompt came {came - wrote:.3f} s after it was written", out)
    with open(os.path.join(job.out, "shown"), "w"):
        pass
    out, _ = read_until(p.stdout.fileno(), b"[default1]:other\n", 30, out)
    with open(os.path.join(job.out, "go"), "w"):
        pass
    rest, err = p.communicate(timeout=60)
    out += rest.encode()
    check(p.returncode == 0, f"ddprun exited {p.returncode}", out, err)
    check(out == b"[default0]:prompt> \n[default1]:other\n[default0]:answer\n",
          "console lines", out, err)
    os.mkdir(job.out + "1")
    p = job.start(["--nproc-per-node=1", "--tee=3", worker, job.out + "1", "wait"])
    out, _ = read_until(p.stdout.fileno(), b"[default0]:prompt> ", 60)
    time.sleep(0.2)
    with open(os.path.join(job.out + "1", "go"), "w"):
        pass
    rest, err = p.communicate(timeout=60)
    out += rest.encode()
    check(out == b"[default0]:prompt> answer\n", "a continued line, prefixed once", out, err)


def on_a_terminal(job, argv, talk, after=lambda fd: None):
    """Runs ddprun (`argv`) with a new pty as its terminal; `talk(fd)` reads (and types)
    on the pty's master and returns what it read. Once ddprun has ended: (its exit code,
    what talk() read, after(fd)), `after` looking at the pty before it is closed."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(job.dir)
            os.execve(job.ddprun, argv, job.env)
        finally:
            os._exit(127)
    try:
        out = talk(fd)
        _, status = os.waitpid(pid, 0)
        pid = 0
        return os.waitstatus_to_exitcode(status), out, after(fd)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


@test()
def worker_sees_a_terminal(job):
    """Issue 21: ddprun run on a terminal (a pty): the shown worker's stdin, stdout and
    stderr are terminals, and input() reads a line typed to ddprun's terminal (stdin reaches
    the one rank --local-ranks-filter shows; the hidden one reads /dev/null)."""
    worker = os.path.join(WORKERS, "prompt.py")
    argv = [job.ddprun, "--nproc-per-node=2", "--local-ranks-filter=0", worker, job.out,
            "input"]

    def talk(fd):
        out, _ = read_until(fd, b"name? ", 60)
        os.write(fd, b"hello\n")
        return read_until(fd, b"got hello", 30, out)[0]
    rc, out, _ = on_a_terminal(job, argv, talk)
    check(rc == 0, f"ddprun exited {rc}", out)
    facts = {r: json.loads(read_text(os.path.join(job.out, f"tty.{r}.json"))) for r in (0, 1)}
    check(facts[0]["stdin"] and facts[0]["stdout"] and facts[0]["stderr"],
          "rank 0 sees a terminal", facts)
    check(facts[1]["stdin_target"] == "/dev/null" and not facts[1]["stdout"],
          "the hidden rank reads /dev/null and writes to its log", facts)


@test()
def tee_streams_stay_pipes_on_a_terminal(job):
    """Issue 31 item 12: ddprun on a terminal with -t 1: the worker's stdout, tee'd to
    stdout.log, is a pipe (no colours or '\\r' progress bars in the file, as torchrun's);
    its stderr, which goes to the console alone, is a terminal."""
    logs = os.path.join(job.dir, "logs")
    argv = [job.ddprun, "--nproc-per-node=1", "-t", "1", "--log-dir", logs,
            os.path.join(WORKERS, "prompt.py"), job.out, "facts"]
    rc, out, _ = on_a_terminal(job, argv, lambda fd: read_until(fd, b"[default0]:done", 60)[0])
    check(rc == 0, f"ddprun exited {rc}", out)
    facts = json.loads(read_text(os.path.join(job.out, "tty.0.json")))
    check(not facts["stdout"], "the tee'd stdout is a pipe", facts)
    check(facts["stderr"], "stderr, on the console alone, is a terminal", facts)
    (run,) = os.listdir(logs)
    check(read_text(os.path.join(logs, run, "attempt_0", "0", "stdout.log")) == "done\n",
          "stdout.log", facts)


@test()
def terminal_modes_restored(job):
    """A worker that leaves ddprun's terminal in raw mode (killed inside pdb) does not leave
    the shell without echo: ddprun puts back the settings it found (issue 31 item 20;
    torchrun does not)."""
    import termios
    argv = [job.ddprun, "--nproc-per-node=1", "--no-python", PYTHON, "-c",
            "import sys, tty; tty.setraw(0); print('raw', flush=True); sys.exit(1)", job.token]
    seen = []

    def talk(fd):
        seen.append(termios.tcgetattr(fd)[3])
        return read_until(fd, b"raw", 60)[0]
    rc, out, lflag = on_a_terminal(job, argv, talk, lambda fd: termios.tcgetattr(fd)[3])
    check(rc == 1, f"ddprun exited {rc}", out)
    before = seen[0]
    want = termios.ICANON | termios.ECHO
    check(before & want == want, f"the pty started cooked: {before:#o}")
    check(lflag & want == want, f"ICANON and ECHO back after ddprun: {lflag:#o}")


@test()
def default_log_dir_removed(job):
    """Removed after a run whose workers all succeeded and wrote no log file; kept, as
    torchrun's, after a failure (issue 31: the attempt folders hold the error files) and
    when -r/-t wrote log files there."""
    rc, out, err = job.run(["--nproc-per-node=1", *job.probe("print=x")])
    check(rc == 0 and not torchelastic_dirs(job), "left behind after success", err)
    rc, out, err = job.run(["--nproc-per-node=2", *job.probe("rank=1", "exit=3")])
    check(rc == 1, f"ddprun exited {rc}", err)
    check("exitcode  : 3" in err, "no failure report", err)
    kept = torchelastic_dirs(job)
    check(len(kept) == 1, f"not kept after a failure: {kept}", err)
    (run,) = os.listdir(os.path.join(job.dir, kept[0]))
    check(sorted(os.listdir(os.path.join(job.dir, kept[0], run, "attempt_0"))) == ["0", "1"],
          "the attempt's rank folders", err)
    shutil.rmtree(os.path.join(job.dir, kept[0]))
    rc, out, err = job.run(["--nproc-per-node=1", "-r", "1", *job.probe("print=kept")])
    check(rc == 0 and len(torchelastic_dirs(job)) == 1, "redirected output not kept", err)
    check("worker logs kept in" in err, "no notice naming the kept directory", err)


# ---------------------------------------------------------------------------------------
# Daemons that leave their worker's process group (issue 14)


def daemon_job(job, then):
    return ["--nproc-per-node=2", os.path.join(WORKERS, "daemon.py"), job.out, job.token, then]


def daemon_pids(job):
    return [int(open(os.path.join(job.out, n)).read()) for n in os.listdir(job.out)
            if n.startswith("daemon.") and not n.endswith(".tmp")]


@test()
def daemons_die_with_the_job(job):
    rc, out, err = job.run(daemon_job(job, "exit"))
    check(rc == 0, f"ddprun exited {rc}", err)
    check(len(daemon_pids(job)) == 4, "4 daemons (setsid and setpgid, 2 ranks) started")
    poll(lambda: not job.job_processes(), 10, "no daemon left after the job ended")


@test()
def kill_9_kills_daemons(job):
    p = job.start(daemon_job(job, "sleep"))
    poll(lambda: all(os.path.exists(os.path.join(job.out, f"ready.{r}")) for r in (0, 1)),
         60, "workers and daemons ready")
    check(len(job.job_processes()) >= 6, "2 workers and 4 daemons running",
          str(job.job_processes()))
    p.kill()
    p.communicate(timeout=30)
    poll(lambda: not job.job_processes(), 10, "every worker and daemon gone")


# ---------------------------------------------------------------------------------------
# Watchdogs (issue 12)


def marked_line(path, marker):
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if marker in line:
                return number
    raise AssertionError(f"{marker} not in {path}")


def read_time(path):
    return float(read_text(path) or "nan")


@test(tiers=("113", "214"))
def straggler_ranking_says_when_it_has_no_recorder(job):
    """Issue 34: under --stall-timeout the straggler ranking needs a flight recorder that
    records the workers' collectives. One node, 2 ranks, the last one 0.3 s late at each
    all_reduce for 12 s, --straggler-window 5 (at least 8 collectives a window on a loaded
    machine, at 0.4 s each): with PyTorch 1.13 and 2.6 ddprun says once
    that no worker reported a collective from a recorder (INFO); with 2.14 it says nothing
    of the kind and names rank 1 the straggler. The job succeeds either way."""
    worker = os.path.join(REPO, "tests", "multinode", "workers", "job_worker.py")
    rc, out, err = job.run(["--nproc-per-node=2", "--stall-timeout=60", "--straggler-window=5",
                            worker, "straggle", "12"], env={"LOGLEVEL": "INFO"}, timeout=120)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    said = [l for l in err.splitlines() if "straggler ranking: no worker of this node reported "
            "a collective from PyTorch's flight recorder" in l]
    if tuple(map(int, torch_version().split(".")[:2])) >= (2, 14):
        check(not said, "a recorder reports: nothing said of its absence", err)
        check(any("warning: straggler: rank 1 on " in l for l in err.splitlines()),
              "rank 1 named the straggler", err)
    else:
        check(len(said) == 1 and "info: " in said[0], "said once, at INFO", err)


@test(every_tier=True)
def stall_watchdog_reports_stacks(job):
    """PET_STALL_TIMEOUT=3, a gloo job (workers/stall.py) whose ranks first compute for twice
    the timeout without printing (no false alarm), then rank 1 sleeps forever in its
    training step while rank 0 blocks in all_reduce: ddprun prints both ranks' Python
    stacks (the sleep's and the all_reduce's file:line) in the stall report and restarts
    within the timeout plus a bound (--max-restarts=1); the next attempt succeeds."""
    worker = os.path.join(WORKERS, "stall.py")
    timeout = 3
    rc, out, err = job.run(["--nproc-per-node=2", "--max-restarts=1", worker, job.out,
                            str(2 * timeout)], env={"PET_STALL_TIMEOUT": str(timeout)},
                           timeout=240)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    stalls = [l for l in err.splitlines() if "error: stall: " in l]
    check(len(stalls) == 1 and "local rank 0 (pid " in stalls[0]
          and "local rank 1 (pid " in stalls[0], "one stall naming both ranks", err)
    check("restarting (1/1 restarts)" in err, "restart not logged", err)
    lines = err.splitlines()
    check("stall.py FAILED" in err, "no stall report", err)
    report = lines[lines.index(next(l for l in lines if l.endswith("stall.py FAILED"))):]
    blocks = {}
    for i, line in enumerate(report):
        if line.startswith("  rank      : "):
            blocks[int(line.split()[2])] = report[i:i + 40]
    check(sorted(blocks) == [0, 1], "both ranks in the report", err)
    sleep_at = f'File "{worker}", line {marked_line(worker, "# STALL-SLEEP")} in train_step'
    reduce_at = f'File "{worker}", line {marked_line(worker, "# STALL-ALLREDUCE")} in train_step'
    r1 = "\n".join(blocks[1])
    r0 = "\n".join(blocks[0])
    for r, text in ((0, r0), (1, r1)):
        check("stalled: no progress (Python stack or output) for " in text, f"rank {r}'s note",
              text)
    check(sleep_at in r1, "rank 1's stack shows the sleep", r1)
    check(reduce_at in r0, "rank 0's stack shows the all_reduce", r0)
    check("in all_reduce" in r0 and "distributed_c10d.py" in r0, "torch's frame", r0)
    check("  exitcode  : -6 (pid: " in r0 + r1, "SIGABRT exit", err)
    # Detected about the timeout after both ranks went idle, and within it plus a bound
    # (sampling, the dump, the restart and rendezvous, the next workers' Python start).
    # Idleness starts with the last CPU burst before a step's mark, and samples are
    # timeout/5 apart: up to a second early, measured from the later mark.
    stuck = max(read_time(os.path.join(job.out, f"step.0.{r}")) for r in (0, 1))
    restarted = min(read_time(os.path.join(job.out, f"start.1.{r}")) for r in (0, 1))
    check(timeout - 1 <= restarted - stuck <= timeout + 15,
          f"restarted {restarted - stuck:.1f} s after the stall began", err)
    for r in (0, 1):
        check(os.path.exists(os.path.join(job.out, f"computed.0.{r}")), f"rank {r} computed", err)
        check(os.path.exists(os.path.join(job.out, f"start.1.{r}")), f"rank {r} attempt 1", err)


@test()
def stall_watchdog_sees_where_ranks_are(job):
    """Issue 23: with --stall-timeout 2, a PyTorch-free worker spinning in `while True: pass`
    (busy, so CPU time would call it progress) is reported with its file:line; a worker
    that computes silently through changing lines for 3 timeouts is not; a worker stopped
    by SIGSTOP is named as stopped, and continued so that its stack is dumped."""
    worker = os.path.join(WORKERS, "spin.py")
    args = ["--nproc-per-node=1", "--max-restarts=0", "--stall-timeout=2", worker, job.out]
    spin = f"{worker}:{marked_line(worker, '# SPIN')} in <module>"
    rc, out, err = job.run(args + ["spin"], timeout=60)
    check(rc != 0, f"ddprun exited {rc}", out, err)
    stalls = [l for l in err.splitlines() if "error: stall: " in l]
    check(len(stalls) == 1 and f"at {spin}" in stalls[0], "the stall names the line", err)
    check("stalled: no progress (Python stack or output) for " in err
          and f"s, at {spin}; stacks dumped" in err, "the report's note", err)
    check(f'File "{worker}", line {marked_line(worker, "# SPIN")}' in err, "the stack", err)

    # Issue 31 item 20: a TMPDIR with ':' (no PYTHONPATH entry can name it) still has the
    # stacks sampled (busy, the spin is only seen by its stack).
    colon = os.path.join(job.dir, "a:b")
    os.mkdir(colon)
    rc, out, err = job.run(args + ["spin"], env={"TMPDIR": colon}, timeout=30)
    check(rc != 0 and f"at {spin}" in err, f"TMPDIR with ':': exit {rc}", out, err)

    rc, out, err = job.run(args + ["move", "6"], timeout=60)
    check(rc == 0 and "stall" not in err, f"a moving worker reported (exit {rc})", out, err)
    check(int(read_text(os.path.join(job.out, "count"))) > 0, "it moved", err)

    rc, out, err = job.run(args + ["stop"], timeout=60)
    check(rc != 0, f"ddprun exited {rc}", out, err)
    stalls = [l for l in err.splitlines() if "error: stall: " in l]
    check(len(stalls) == 1 and "stopped: state T" in stalls[0], "the stall says stopped", err)
    check("stalled: the process was stopped (state T in /proc/" in err
          and "continued (SIGCONT)" in err, "the report's note", err)
    # Continued to be dumped, the worker may already be on the next line (the SIGABRT can
    # land on its sampler thread while the main thread goes on to time.sleep).
    stop = marked_line(worker, "# STOP")
    check(any(f'File "{worker}", line {n}' in err for n in (stop, stop + 1)), "its stack", err)


@test()
def stall_watchdog_ignores_its_own_back_pressure(job):
    """Issue 31 item 14: ddprun's stdout is not read for 4 stall timeouts (`| (sleep 8;
    cat)`): ddprun stops reading its workers' pipes and their print blocks; that is not a
    stall. Every line arrives once the reader reads, and the job succeeds."""
    worker = os.path.join(WORKERS, "spin.py")
    lines = 20000  # 2 MB per rank: past ddprun's queue and the pipes
    p = job.start(["--nproc-per-node=2", "--max-restarts=0", "--stall-timeout=2", worker,
                   job.out, "chatty", str(lines)])
    time.sleep(8)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0 and "stall" not in err, f"ddprun exited {p.returncode}", err)
    for r in (0, 1):
        got = sum(1 for l in out.splitlines() if l.startswith(f"rank {r} line "))
        check(got == lines, f"rank {r}: {got} of {lines} lines", err)


@test()
def stall_watchdog_follows_the_work(job):
    """Issue 31 item 15: with --stall-timeout 2, workers that compute silently for 3
    timeouts are not called stalled when the work is not in the first Python process's
    main thread: after re-exec'ing themselves (os.execv), in a child the worker waits for
    (a wrapper's subprocess.run), or in a thread the main thread joins. A thread that
    spins while the main thread joins it is still reported, at the thread's line."""
    worker = os.path.join(WORKERS, "spin.py")
    args = ["--nproc-per-node=1", "--max-restarts=0", "--stall-timeout=2", worker, job.out]
    for mode in ("reexec", "wrap", "thread"):
        count = os.path.join(job.out, "count")
        if os.path.exists(count):
            os.remove(count)
        rc, out, err = job.run(args + [mode, "6"], timeout=60)
        check(rc == 0 and "stall" not in err, f"{mode}: ddprun exited {rc}", out, err)
        check(os.path.exists(count), f"{mode}: the work did not finish", err)
    rc, out, err = job.run(args + ["thread-spin"], timeout=60)
    spin = f"{worker}:{marked_line(worker, '# THREAD-SPIN')} in spin"
    stalls = [l for l in err.splitlines() if "error: stall: " in l]
    check(rc != 0 and len(stalls) == 1 and f"at {spin}" in stalls[0],
          f"the spinning thread's stall (exit {rc})", err)


@test()
def stall_watchdog_waits_for_a_slow_import(job):
    """A module whose import computes for 3 stall timeouts in one C call (as loading
    libtorch does on a loaded host: a CI run met it with --stall-timeout 3) is not a stall:
    while a rank imports, its CPU time is progress too. The same call outside any import is
    one, at its line: there the stack alone decides."""
    worker = os.path.join(WORKERS, "spin.py")
    args = ["--nproc-per-node=1", "--max-restarts=0", "--stall-timeout=2", worker, job.out]
    rc, out, err = job.run(args + ["import", "6"], timeout=90)
    check(rc == 0 and "stall" not in err, f"a slow import called a stall (exit {rc})", out, err)
    check(os.path.exists(os.path.join(job.out, "count")), "the import did not finish", err)
    rc, out, err = job.run(args + ["ccall", "6"], timeout=90)
    stalls = [l for l in err.splitlines() if "error: stall: " in l]
    check(rc != 0 and len(stalls) == 1
          and f"at {worker}:{marked_line(worker, '# CCALL')} in <module>" in stalls[0],
          f"the C call's stall (exit {rc})", err)


@test(every_tier=True)
def file_timer_kills_expired_scope(job):
    """TORCHELASTIC_ENABLE_FILE_TIMER=1 with the worker PyTorch's own FileTimerClient
    (workers/file_timer.py): the expired scope's worker gets the signal its client asked
    for (SIGTERM), the one that left its scope of the same name is untouched, malformed,
    oversized and foreign-pid requests are ignored with warnings, the group restarts
    (--max-restarts=1) and the next attempt succeeds; the pipe is removed at the end."""
    pipe = os.path.join(job.dir, "timer.fifo")
    rc, out, err = job.run(["--nproc-per-node=2", "--max-restarts=1",
                            os.path.join(WORKERS, "file_timer.py"), job.out],
                           env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1",
                                "TORCHELASTIC_TIMER_FILE": pipe}, timeout=180)
    check(rc == 0, f"ddprun exited {rc}", out, err)
    check("file timer: ignoring a malformed request (not JSON): this is not json" in err,
          "malformed request warning", err)
    check("ignoring a malformed request ('pid' is missing or not an integer)" in err,
          "mistyped request warning", err)
    check("file timer: ignoring a request longer than 4096 bytes" in err, "oversized", err)
    check("which is not a process of this job; not signalling it" in err, "foreign pid", err)
    check("file timer: scope 'step' of pid " in err and "expired; sending it SIGTERM" in err,
          "expiry line", err)
    check(err.count("expired; sending it") == 1, "only rank 1 signalled", err)
    check("restarting (1/1 restarts)" in err, "restart", err)
    lines = err.splitlines()
    check("  rank      : 1 (local_rank: 1)" in lines and "  exitcode  : -15 (pid: " in err,
          "rank 1 killed by SIGTERM in the report", err)
    check("file timer: scope 'step' expired; sent SIGTERM by ddprun" in err, "report note", err)
    for name in ("entered.0.0", "left.0.0", "entered.0.1", "done.1.0", "done.1.1"):
        check(os.path.exists(os.path.join(job.out, name)), f"{name} missing", err)
    check(not os.path.exists(os.path.join(job.out, "left.0.1")), "rank 1 left its scope", err)
    check(not os.path.exists(pipe), "the pipe was not removed")


@test()
def numa_binding_pins_workers(job):
    """--numa-binding on this machine: one line shows the plan, and each worker's
    Cpus_allowed_list (/proc/self/status, read by the worker itself) is its rank's CPUs."""
    script = os.path.join(job.dir, "affinity.py")
    with open(script, "w") as f:
        f.write("import os\n"
                "line = [l for l in open('/proc/self/status') if l.startswith('Cpus_allowed_list')]\n"
                "print('rank', os.environ['LOCAL_RANK'], 'cpus', line[0].split()[1])\n")
    for mode in ("node", "socket", "exclusive", "core-complex"):
        rc, out, err = job.run(["--nproc-per-node=2", f"--numa-binding={mode}", script],
                               timeout=60)
        check(rc == 0, f"{mode}: ddprun exited {rc}", out, err)
        plans = [l for l in err.splitlines() if f"numa binding ({mode}):" in l]
        check(len(plans) == 1, f"{mode}: one plan line", err)
        plan = dict(part.split(" -> ") for part in
                    plans[0].split(f"numa binding ({mode}): ")[1].split(", "))
        for r in (0, 1):
            want = plan[f"rank {r}"].split(" cpus ")[1].split(" ")[0]
            check(f"rank {r} cpus {want}" in out, f"{mode}: rank {r} runs on {want}", out, err)
    check("ignoring" not in err, "--numa-binding is no longer ignored", err)


# ---------------------------------------------------------------------------------------
# Issue 21: torchrun 2.11 habits


@test()
def worker_python_beside_launcher(job):
    """ddprun in a venv's bin (a symlink, and started by name from PATH) runs its workers
    with that venv's python, not python3 from PATH; PYTHON_EXEC still wins, and ddprun
    outside any environment keeps python3 from PATH. The start line names the python."""
    venv = os.path.join(job.dir, "venv")
    r = subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip",
                        "--system-site-packages", venv], capture_output=True, text=True)
    check(r.returncode == 0, "python3 -m venv failed", r.stdout, r.stderr)
    os.symlink(os.path.abspath(job.ddprun), os.path.join(venv, "bin", "ddprun"))
    script = os.path.join(job.dir, "which.py")
    with open(script, "w") as f:
        f.write("import sys\nprint('exe', sys.executable, 'prefix', sys.prefix)\n")
    venv_python = os.path.join(venv, "bin", "python3")
    base = {k: v for k, v in job.env.items() if k != "PYTHON_EXEC"}
    base.update(PATH="/usr/bin:/bin", LOGLEVEL="INFO")
    cases = [
        ([os.path.join(venv, "bin", "ddprun")], base, venv_python),
        (["ddprun"], dict(base, PATH=f"{venv}/bin:/usr/bin:/bin"), venv_python),
        ([os.path.join(venv, "bin", "ddprun")], dict(base, PYTHON_EXEC="/usr/bin/python3"),
         "/usr/bin/python3"),
        ([job.ddprun], base, "python3"),
    ]
    for argv, env, want in cases:
        rc, out, err = job.run_process([*argv, script], env, 60)
        check(rc == 0, f"{argv}: ddprun exited {rc}", out, err)
        exe = out.split("exe ", 1)[1].split(" prefix ")[0] if "exe " in out else ""
        want_exe = "/usr/bin/python3" if want == "python3" else want
        check(exe == want_exe, f"{argv}: worker ran {exe!r}, expected {want_exe!r}", out, err)
        if want == venv_python:
            check(f"prefix {venv}" in out, f"{argv}: sys.prefix is not the venv", out)
        check(f"started 1 workers with {want} " in err, f"{argv}: start line names {want}", err)


def two_agents(job, name, endpoint, addrs, conf, timeout=60):
    """Two c10d agents (--local-addr from `addrs`, None: none) of run id `name` meeting at
    `endpoint`, each with one probe worker: [(rc, log text, seconds)]."""
    procs = []
    out = os.path.join(job.dir, name)  # one command for both: each rank writes its own file
    os.mkdir(out)
    for i, addr in enumerate(addrs):
        args = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}", f"--rdzv-id={name}", f"--rdzv-conf={conf}"]
        if addr:
            args.append(f"--local-addr={addr}")
        log = os.path.join(job.dir, f"{name}.{i}.log")
        procs.append((job.start([*args, os.path.join(WORKERS, "probe.py"), out, job.token],
                                log=log), log, time.monotonic()))
    results = []
    for p, log, t0 in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise blackbox.Failed(f"{name}: agent still running after {timeout} s\n"
                                  + "\n".join(read_text(l) for _, l, _ in procs))
        results.append((p.returncode, read_text(log), time.monotonic() - t0))
    return results


@test()
def loopback_endpoint_hosted(job):
    """c10d at 127.0.0.5, a loopback address that no interface lists: an agent hosts it
    (torchrun treats every loopback address as this host). Without --local-addr both try
    and one wins; with --local-addr 127.0.0.6/127.0.0.7 (neither is the endpoint's) one
    hosts it after 5 s of refused connects. Both finish well before the join timeout."""
    for name, addrs in (("lo-plain", (None, None)), ("lo-others", ("127.0.0.6", "127.0.0.7"))):
        port = job.reserve_port("127.0.0.5")
        results = two_agents(job, name, f"127.0.0.5:{port}", addrs, "join_timeout=60")
        for rc, text, secs in results:
            check(rc == 0 and secs < 30, f"{name}: exit {rc} after {secs:.1f} s", text)
        if name == "lo-others":
            check(any("this node hosts it" in t for _, t, _ in results),
                  f"{name}: an agent said it hosts the endpoint",
                  "\n".join(t for _, t, _ in results))


@test()
def unhostable_endpoint_reported_early(job):
    """An endpoint no agent can host is reported in one line long before the join timeout
    (60 s here): is_host=0 everywhere (connections refused for read_timeout=3 s), and a
    loopback endpoint this machine cannot bind (::1 in a network namespace whose lo is
    down: at once)."""
    port = job.reserve_port("127.0.0.5")
    results = two_agents(job, "nohost", f"127.0.0.5:{port}", (None, None),
                         "join_timeout=60,read_timeout=3,is_host=0")
    for rc, text, secs in results:
        errors = [l for l in text.splitlines() if "no agent hosts the rendezvous store" in l]
        check(rc == 1 and secs < 30, f"is_host=0: exit {rc} after {secs:.1f} s", text)
        check(len(errors) == 1 and f"127.0.0.5:{port}" in errors[0]
              and "refused" in errors[0], "is_host=0: one line naming the endpoint", text)
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        print("unshare -n is not permitted here: the ::1 case is not run")
        return
    t0 = time.monotonic()
    rc, out, err = job.run_process(
        ["unshare", "-n", job.ddprun, "--nnodes=2", "--rdzv-backend=c10d",
         "--rdzv-endpoint=[::1]:29999", "--rdzv-conf=join_timeout=60",
         *job.probe()], job.env, 60)
    secs = time.monotonic() - t0
    errors = [l for l in err.splitlines() if "cannot host the rendezvous store" in l]
    check(rc == 1 and secs < 20, f"::1 unbindable: exit {rc} after {secs:.1f} s", err)
    check(len(errors) == 1 and "[::1]:29999" in errors[0] and "nor can any other" in errors[0],
          "::1 unbindable: one line naming the endpoint", err)


@test(needs_torch=False)
def exit_codes_by_class(job):
    """Issue 32: with --exit-codes classes (or PET_EXIT_CODES=classes) each class of
    failure exits with its own status: a worker's own error 1, a worker SIGKILLed from
    outside (the OOM killer) 3, a failed rendezvous 3, a stall 4, ddprun stopped by SIGTERM
    128+15; without the flag every one of them exits 1, as torchrun. A bad value is a usage
    error naming the flag."""
    port = job.reserve_port()
    cases = [
        ("a worker's own error", ["--no-python", "sh", "-c", "exit 3"], 1),
        ("a worker SIGKILLed", ["--no-python", "sh", "-c", "kill -9 $$$$"], 3),
        ("a stall", ["--stall-timeout=1", "--no-python", "sleep", "60"], 4),
        ("a failed rendezvous", ["--nnodes=2", "--rdzv-backend=c10d",
                                 f"--rdzv-endpoint=127.0.0.1:{port}",
                                 "--rdzv-conf=join_timeout=2", "--no-python", "true"], 3),
    ]
    for name, args, status in cases:
        for extra, env, want in ((["--exit-codes=classes"], {}, status), ([], {}, 1)):
            rc, out, err = job.run(["--nproc-per-node=1", "--max-restarts=0", *extra, *args],
                                   env=env)
            check(rc == want, f"{name} {extra}: exit {rc}, expected {want}", out, err)
    rc, out, err = job.run(["--nproc-per-node=1", "--no-python", "sh", "-c", "kill -9 $$$$"],
                           env={"PET_EXIT_CODES": "classes"})
    check(rc == 3, f"PET_EXIT_CODES=classes: exit {rc}", out, err)
    for extra, want in ((["--exit-codes=classes"], 128 + signal.SIGTERM), ([], 1)):
        started = os.path.join(job.out, "started")
        if os.path.exists(started):
            os.remove(started)
        p = job.start(["--nproc-per-node=1", *extra, "--no-python", "sh", "-c",
                       f"touch {started}; exec sleep 60"])
        poll(lambda: os.path.exists(started), 30, "the worker started")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        check(p.returncode == want, f"SIGTERM {extra}: exit {p.returncode}, expected {want}", err)
    rc, out, err = job.run(["--exit-codes=sometimes", "--no-python", "true"])
    check(rc == 2 and "--exit-codes: 'sometimes' is neither" in err, "a usage error", err)

def _validated_record(path):
    """The run record at `path`, checked against docs/run-record.schema.json by
    python3-jsonschema (Debian's)."""
    import jsonschema
    with open(os.path.join(REPO, "docs", "run-record.schema.json")) as f:
        schema = json.load(f)
    with open(path) as f:
        record = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(record))
    check(not errors, f"{path} does not match the schema: {[e.message for e in errors]}", record)
    return record


@test(needs_torch=False)
def run_record_validates(job):
    """Issue 32: --record-file writes one JSON run record when the run ends, valid against
    docs/run-record.schema.json: a failing job with one restart (two attempts, each ended by
    the workers' own error; the failures; exit class and status), a job stopped by SIGKILL of
    a worker under --exit-codes classes (infrastructure, 3), and a successful one
    (PET_RECORD_FILE). An unwritable path is one warning and changes nothing else."""
    rec = os.path.join(job.dir, "rec.json")
    rc, out, err = job.run(["--nproc-per-node=2", "--max-restarts=1", f"--record-file={rec}",
                            "--no-python", "sh", "-c", 'test "$RANK" = 0 || exit 7'])
    check(rc == 1, f"exit {rc}", out, err)
    r = _validated_record(rec)
    check(r["exit_class"] == "worker error" and r["exit_status"] == 1
          and r["restarts_spent"] == 1, "class, status, restarts", r)
    check([a["end"] for a in r["attempts"]] == ["worker error", "worker error"]
          and [a["attempt"] for a in r["attempts"]] == [0, 1], "two attempts", r)
    check([(f["rank"], f["exitcode"]) for f in r["failures"]][:1] == [(1, 7)], "failures", r)
    check(len(r["rounds"]) >= 1 and r["rounds"][0]["world_size"] == 2, "rounds", r)
    check(r["root_cause"] is None and r["stall_verdict"] is None, "one node: no job cause", r)
    rc, out, err = job.run(["--exit-codes=classes", f"--record-file={rec}", "--no-python", "sh",
                            "-c", "kill -9 $$$$"])
    r = _validated_record(rec)
    check(rc == 3 and r["exit_class"] == "infrastructure" and r["exit_status"] == 3,
          "a SIGKILLed worker: infrastructure", r)
    rc, out, err = job.run(["--nproc-per-node=2", "--no-python", "true"],
                           env={"PET_RECORD_FILE": rec})
    check(rc == 0, f"exit {rc}", out, err)
    r = _validated_record(rec)
    check(r["exit_class"] == "success" and r["exit_status"] == 0
          and [a["end"] for a in r["attempts"]] == ["success"], "success", r)
    rc, out, err = job.run(["--record-file=/nonexistent-dir/rec.json", "--no-python", "true"])
    check(rc == 0 and "cannot write the run record /nonexistent-dir/rec.json" in err,
          "an unwritable record path is a warning", out, err)


def _slow_site(job):
    """A sitecustomize that hangs every interpreter started with this PYTHONPATH at start
    (as an import from a dead NFS mount does): the pre-flight check's hang fixture."""
    site = os.path.join(job.dir, "hang_site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write("import time\ntime.sleep(300)\n")
    return {"PYTHONPATH": site}


def _preflight_processes(job):
    return [(pid, cmd) for pid, cmd in _processes_with(job.dir) if "preflight.py" in cmd]


def _processes_with(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        if text in cmd and int(pid) != os.getpid():
            found.append((int(pid), cmd))
    return found


@test()
def preflight_check_that_hangs_is_bounded(job):
    """Issue 34: the check's interpreter hangs at start; --preflight-timeout 3 bounds it:
    ddprun names what happened and exits 1 within seconds, no worker started, nothing left."""
    start = time.monotonic()
    rc, out, err = job.run(["--preflight", "--preflight-timeout=3", "--nproc-per-node=1",
                            *job.probe()], env=_slow_site(job), timeout=60)
    took = time.monotonic() - start
    check(rc == 1, f"ddprun exited {rc}", out, err)
    check("BAD: the check found nothing within 3 s" in err, "the table says why", err)
    check("the job stops before its workers start" in err, "one line says what ddprun does", err)
    check(took < 30, f"bounded by the check's timeout: took {took:.1f} s", err)
    check(not job.envs(), "no worker ran", job.envs())
    poll(lambda: not _preflight_processes(job), 10, "no check process left")


@test(needs_torch=True)
def preflight_check_dying_midway_is_bad(job):
    """Issue 34: the check's process dies after `import torch` passed, during the device
    check (SIGKILL from a thread that watches its findings file, as a crashing device
    would): the node is bad, named with what ended it, never taken for good because the
    checks that were written passed."""
    site = os.path.join(job.dir, "die_site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write("import os, sys, threading, time\n"
                "def _die():\n"
                "    while True:\n"
                "        try:\n"
                "            if 'import torch' in open(sys.argv[1]).read():\n"
                "                os.kill(os.getpid(), 9)\n"
                "        except OSError:\n"
                "            pass\n"
                "        time.sleep(0.001)\n"
                "if 'DDPRUN_PREFLIGHT_NODE' in os.environ:\n"
                "    threading.Thread(target=_die, daemon=True).start()\n")
    rc, out, err = job.run(["--preflight", "--nproc-per-node=1", *job.probe()],
                           env={"PYTHONPATH": site}, timeout=120)
    check(rc == 1, f"ddprun exited {rc}", out, err)
    check("BAD: the local checks: the check ended before they did: killed by signal 9" in err,
          "the table says what ended it", err)
    check(not job.envs(), "no worker ran", job.envs())


@test()
def preflight_stopped_by_sigterm(job):
    """Issue 34: SIGTERM while the check runs: the check is stopped at once, ddprun says so
    and exits 1; nothing is left."""
    p = job.start(["--preflight", "--nproc-per-node=1", *job.probe()], env=_slow_site(job))
    poll(lambda: _preflight_processes(job), 30, "the check runs")
    start = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    took = time.monotonic() - start
    check(p.returncode == 1, f"ddprun exited {p.returncode}", err)
    check("received SIGTERM during the pre-flight check" in err and "stopped by SIGTERM" in err,
          "ddprun says so", err)
    check(took < 10, f"stopped at once: took {took:.1f} s", err)
    poll(lambda: not _preflight_processes(job), 10, "no check process left")


if __name__ == "__main__":
    sys.exit(suite.main(sys.argv, Job))
