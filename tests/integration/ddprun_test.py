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
import shutil
import signal
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
    check("epoch 1: loss" in out, "per-epoch loss missing", out)
    check("replicas identical: True" in out, "replicas differ", out, err)
    check(os.path.exists(os.path.join(ckpt, "checkpoint.pt")), "no checkpoint")
    check("OMP_NUM_THREADS" in err, "torchrun's OMP_NUM_THREADS notice missing", err)


@test(every_tier=True)
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


@test(every_tier=True)
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
    check("  ValueError: rank 1 failed on purpose (attempt 0)" in lines, "traceback", err)
    root = lines[lines.index("Root Cause (first observed failure):"):]
    ef = [l for l in root if l.startswith("  error_file: ")]
    # Read for the report (the traceback above), then removed with the default log dir.
    check(ef and ef[0].endswith("/attempt_0/1/error.json") and not os.path.exists(ef[0][14:]),
          "error_file", err)
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
              any(l.startswith("  exitcode  : -15 (pid: ") for l in others),
              f"{args}: rank 0, stopped by the agent, listed with -15 (torchrun 2.x)", err)
        check("  rank      : 1 (local_rank: 1)" in root, f"{args}: root cause rank", err)
        check(any(l.startswith("  exitcode  : 1 (pid: ") for l in root), f"{args}: exitcode", err)
        check("  error_file: <N/A>" in root, f"{args}: error_file", err)
        check("  traceback : Traceback (most recent call last):" in root, f"{args}: header", err)
        check(f'    File "{script}", line 3, in fail' in root, f"{args}: the script's line", err)
        check(f"  ValueError: {unique}" in root, f"{args}: the exception", err)
        check("  KeyError: 'k'" in root, f"{args}: the chained exception", err)
        check("To enable traceback" not in err, f"{args}: torchrun's hint", err)
        if "--redirects" in extra or "-r" in extra:
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
            "NCCL_ASYNC_ERROR_HANDLING": "7", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
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
    check(not os.path.exists(os.path.join(job.out, "spawned")), "a worker was spawned")
    # Script arguments that look like ddprun options are the script's.
    rc, out, err = job.run([marker_script, "--nnodes=0", "--bogus"], timeout=60)
    check(rc == 0, f"options after the script were parsed by ddprun ({rc})", err)


@test()
def ignored_options_said_once(job):
    script = os.path.join(job.dir, "ok.py")
    with open(script, "w") as f:
        f.write("print('ran')\n")
    rc, out, err = job.run(["--nproc-per-node=2", "--logs-specs=x",
                            "--duplicate-stderr-filters=x", script], timeout=60)
    check(rc == 0, f"ddprun exited {rc}", err)
    lines = [l for l in err.splitlines() if "ignoring" in l]
    check(len(lines) == 1 and "--logs-specs=x" in lines[0]
          and "--duplicate-stderr-filters=x" in lines[0], "one warning naming both", err)
    rc, out, err = job.run([script], timeout=60)
    check(rc == 0 and "ignoring" not in err, "no warning without those options", err)


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
    rc, out, err = job.run(["--nproc-per-node=1", "--log-dir", "/dev/null", "-t", "3",
                            *job.probe("print=devnull")])
    check(rc == 0 and "[default0]:devnull" in out, "--log-dir /dev/null tees to console", out)
    rc, out, err = job.run(["--nproc-per-node=1", "-t", "1", *job.probe("print=tpl")],
                           env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name}:${rank}>"})
    check("<default:0>tpl" in out.splitlines(), "prefix template", out)


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
    for rank, stream in ((0, "stderr"), (1, "stdout"), (1, "stderr")):
        with open(os.path.join(attempt, str(rank), f"{stream}.log"), "rb") as f:
            got = f.read()
        check(got == data, f"rank {rank} {stream}.log altered ({len(got)} bytes)")


@test()
def default_log_dir_removed(job):
    rc, out, err = job.run(["--nproc-per-node=2", *job.probe("rank=1", "exit=3")])
    check(rc == 1, f"ddprun exited {rc}", err)
    check("exitcode  : 3" in err, "no failure report", err)
    check(not torchelastic_dirs(job), f"left behind: {torchelastic_dirs(job)}")
    rc, out, err = job.run(["--nproc-per-node=1", *job.probe("print=x")])
    check(rc == 0 and not torchelastic_dirs(job), "left behind after success", err)
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
        check("stalled: no progress (CPU time or output) for " in text, f"rank {r}'s note", text)
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


if __name__ == "__main__":
    sys.exit(suite.main(sys.argv, Job))
