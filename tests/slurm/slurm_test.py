#!/usr/bin/env python3
"""Black-box tests of `ddprun` under a real Slurm (Debian 12's slurmctld, slurmd, munge):
a controller and four slurmd "nodes", each in its own network namespace with its own
hostname and address (tests/support/netns.py), names resolved through one test hosts
file; real PyTorch gloo workers (tests/multinode/workers/mn_worker.py).

    slurm_test.py <path to ddprun> <test name>     (ctest runs one test per process)
    slurm_test.py - --list                 (CMake registers the tests from it)

Everything (slurm.conf, munge key and socket, spool and state directories, pid files,
logs) lives in the test's temporary directory; munged and the Slurm daemons are started
by the test and killed (with everything in the node namespaces) at the end. Skips (exit
77) without root, namespaces, the Slurm packages or torch.
"""
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
import blackbox  # noqa: E402
from blackbox import Failed, Skip, check, poll  # noqa: E402
from netns import Netns, netns_or_skip  # noqa: E402

WORKER = os.path.join(os.path.dirname(HERE), "multinode", "workers", "mn_worker.py")
suite = blackbox.Suite(__doc__, needs_torch=True)
test = suite.test
HEAD = "head"
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")
# Short elastic intervals, as tests/multinode: generous for a loaded 2-core ASan machine.
FAST = "keep_alive_interval=1,keep_alive_max_attempt=5,last_call_timeout=1.5,join_timeout=60"


# The daemons die with the test even when ctest SIGKILLs it at its timeout (they run in
# namespaces, beyond the reach of Workspace.close).
DIE_WITH_TEST = ["setpriv", "--pdeathsig", "KILL"]


def node_name(i):
    return f"node{i + 1:02d}"


class SlurmCluster(blackbox.Workspace):
    """munged, slurmctld on HEAD (the hub namespace) and one slurmd per node namespace."""

    def __init__(self, ddprun):
        super().__init__(ddprun, "ddprun_slurm_")
        self.net = None
        self.nodes = 0

    def start_cluster(self, nodes):
        missing = [d for d in DAEMONS if shutil.which(d) is None and
                   not os.path.exists(f"/usr/sbin/{d}")]
        if missing:
            raise Skip(f"Slurm/munge not installed (missing {', '.join(missing)})")
        self.net = netns_or_skip(nodes, hub_address=True)
        self.nodes = nodes
        d = self.dir
        names = [node_name(i) for i in range(nodes)]
        self.hosts = self.net.write_hosts(os.path.join(d, "hosts"), names, HEAD)
        for sub in ("state", "spool", "munge"):
            os.makedirs(os.path.join(d, sub), mode=0o755)
        for name in names:
            os.makedirs(os.path.join(d, "spool", name))
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = os.path.join(d, "munge", "munge.socket")
        self.conf = os.path.join(d, "slurm.conf")
        with open(os.path.join(d, "plugstack.conf"), "w"):
            pass
        last = nodes  # node i has 10.213.0.<i+1>
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=ddprun
SlurmctldHost={HEAD}({Netns.HUB_ADDR})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
SlurmdTimeout=10
InactiveLimit=0
KillWait=5
SlurmdParameters=config_overrides
NodeName=node[01-{last:02d}] NodeAddr=10.213.0.[1-{last}] CPUs=4 State=UNKNOWN
PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self.env = blackbox.job_environment(
            drop=(*blackbox.LAUNCHER_VARIABLES, "MASTER_", "SLURM"), SLURM_CONF=self.conf,
            TMPDIR=d)
        self.start_process(
            [*DIE_WITH_TEST, "munged", "--foreground", "--force", f"--key-file={key}",
             f"--socket={self.munge_socket}", f"--pid-file={d}/munge/munged.pid",
             f"--seed-file={d}/munge/munged.seed", f"--log-file={d}/munge/munged.log"],
            self.env, log=os.path.join(d, "munged.out"), new_session=True)
        poll(lambda: os.path.exists(self.munge_socket), 30, "munged's socket",
             lambda: blackbox.read_text(os.path.join(d, "munged.out")))
        self.ctld = self.start_process(
            [*DIE_WITH_TEST, *self.net.hub_prefix(HEAD, self.hosts), "slurmctld", "-D", "-i"],
            self.env, log=os.path.join(d, "slurmctld.out"), new_session=True)
        self.slurmd = [self.start_process(
            [*DIE_WITH_TEST, *self.net.host_prefix(i, names[i], self.hosts), "slurmd", "-D"],
            self.env, log=os.path.join(d, f"slurmd{i}.out"), new_session=True)
            for i in range(nodes)]
        poll(lambda: self.idle_nodes() == nodes or self.slurmd_gone(), 60,
             f"{nodes} idle nodes", self.logs)
        gone = self.slurmd_gone()
        if gone and "cgroup" in gone:
            # Slurm 22.05's slurmd needs a mounted cgroup file system, even with
            # proctrack/linuxproc and task/none.
            raise Skip(f"slurmd cannot start here: {gone}")
        check(not gone, f"slurmd exited: {gone}", self.logs)

    def slurmd_gone(self):
        """The last line of the first slurmd that exited, or ""."""
        for i, p in enumerate(self.slurmd):
            if p.poll() is not None:
                lines = blackbox.read_text(os.path.join(self.dir, f"slurmd{i}.out")).splitlines()
                return lines[-1] if lines else f"exit {p.returncode}"
        return ""

    def on_head(self, argv, **env):
        """argv as run on HEAD (the login node), with the cluster's environment."""
        return [*DIE_WITH_TEST, *self.net.hub_prefix(HEAD, self.hosts), *argv], dict(self.env,
                                                                                      **env)

    def idle_nodes(self):
        argv, env = self.on_head(["sinfo", "-h", "-o", "%D %t", "-t", "idle"])
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        return sum(int(line.split()[0]) for line in r.stdout.splitlines() if line.strip())

    def srun(self, name, argv, **env):
        """Starts argv on HEAD (an srun command line); its output goes to <name>.log."""
        argv, env = self.on_head(argv, **env)
        log = os.path.join(self.dir, name + ".log")
        return self.start_process(argv, env, log=log, new_session=True, cwd=self.dir), log

    def kill_node(self, i):
        """Node i dies: every process in its namespace (slurmd, slurmstepd, ddprun and its
        workers) is SIGKILLed."""
        for pid in self.net.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def logs(self):
        out = []
        for f in sorted(glob.glob(os.path.join(self.dir, "*.log")) +
                        glob.glob(os.path.join(self.dir, "*.out"))):
            out.append(f"=== {os.path.basename(f)}\n{blackbox.read_text(f)[-4000:]}")
        return "\n".join(out)

    def close(self):
        if self.net is not None:
            # slurmstepd and the tasks leave slurmd's session: end every process of the
            # node namespaces, then the daemons.
            for i in range(self.nodes):
                self.kill_node(i)
        super().close()
        if self.net is not None:
            self.net.close()
            self.net = None


@test
def srun_four_nodes(c):
    """docs/slurm.md's sbatch script (`srun ddprun train.py`, no flag): node ranks follow
    SLURM_NODEID, rank 0 on the first host of the node list; ddprun run in the batch script
    without srun takes nothing from Slurm; several tasks per node are refused with the fix,
    unless every option is given (one ddprun per task, static backend, no --rdzv-id); a node that dies mid-run (its slurmd, slurmstepd, agent and workers killed) is a lost
    node: with --nnodes 3:4 (and srun --no-kill) the three others finish."""
    t0 = time.monotonic()
    c.start_cluster(4)
    print(f"cluster up after {time.monotonic() - t0:.1f} s")
    out = os.path.join(c.dir, "out4")
    os.makedirs(out)
    script = os.path.join(c.dir, "train.sbatch")
    with open(script, "w") as f:
        f.write(f"""#!/bin/sh
#SBATCH --job-name=train
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
LOGLEVEL=INFO {c.ddprun} --no-python true > {c.dir}/nostep.log 2>&1
srun {c.ddprun} {WORKER}
echo "srun exit $?" > {c.dir}/done
""")
    argv, env = c.on_head(["sbatch", "-o", os.path.join(c.dir, "batch.log"), script],
                          MN_OUT=out)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=c.dir)
    check(r.returncode == 0, "sbatch", r.stdout, r.stderr, c.logs)
    done = os.path.join(c.dir, "done")
    poll(lambda: blackbox.read_text(done).strip(), 240, "the batch script's end", c.logs)
    print(f"batch job done after {time.monotonic() - t0:.1f} s")
    text = blackbox.read_text(os.path.join(c.dir, "batch.log"))
    check(blackbox.read_text(done).strip() == "srun exit 0", "srun in the batch script", c.logs)
    recs = blackbox.json_records(out)
    check(len(recs) == 4, f"{len(recs)} records", c.logs)
    for r in recs:
        check(r["allreduce_ok"] and r["WORLD_SIZE"] == "4", "layout", r)
        check(r["MASTER_ADDR"] == Netns.addr(0), "rank 0 on node01", r)
    m = re.search(r"Slurm job step (\d+)\.(\d+): from SLURM_\*: --nnodes=4 --node-rank=\d "
                  r"--rdzv-backend=c10d --rdzv-endpoint=node01:(\d+) --rdzv-id=slurm-\1\.\2 "
                  r"--nproc-per-node=1 \(no GPUs from Slurm\)", text)
    check(m is not None, "the notice line", text)
    check(text.count("Slurm job step") == 4, "one notice per node", text)
    check(sorted(r["RANK"] for r in recs) == ["0", "1", "2", "3"], "ranks", recs)
    check({r["TORCHELASTIC_RUN_ID"] for r in recs} == {f"slurm-{m.group(1)}.{m.group(2)}"},
          "run id", recs)
    nostep = blackbox.read_text(os.path.join(c.dir, "nostep.log"))
    check(f"SLURM_JOB_ID={m.group(1)} is set but this is not an srun job step" in nostep and
          "all 1 local workers succeeded" in nostep, "no step, no Slurm settings", nostep)

    # srun starting two tasks per node: every task refuses with the fix.
    proc, log = c.srun("srun2", ["srun", "-N2", "--ntasks-per-node=2", c.ddprun, WORKER],
                       MN_OUT=out)
    rc = proc.wait(120)
    text = blackbox.read_text(log)
    check(rc != 0, "two tasks per node refused", text)
    check("srun started 4 tasks on 2 nodes" in text and "--ntasks-per-node=1" in text,
          "naming the fix", text)

    # One ddprun per task with the static backend and every option given, as torchrun's
    # per-GPU launch (no --rdzv-id): Slurm stands aside and the four agents form one world.
    out = os.path.join(c.dir, "out_per_task")
    os.makedirs(out)
    per_task = (f"exec {shlex.quote(c.ddprun)} --nproc-per-node 1 --nnodes 4 "
                f'--node-rank "$SLURM_PROCID" --master-addr {node_name(0)} --master-port 29511 '
                f"{shlex.quote(WORKER)}")
    proc, log = c.srun("per_task", ["srun", "-N2", "--ntasks-per-node=2", "sh", "-c", per_task],
                       MN_OUT=out)
    rc = proc.wait(120)
    text = blackbox.read_text(log)
    check(rc == 0, f"one ddprun per task, static: srun exit {rc}", text, c.logs)
    recs = blackbox.json_records(out)
    check(sorted(r["RANK"] for r in recs) == ["0", "1", "2", "3"] and
          all(r["allreduce_ok"] and r["WORLD_SIZE"] == "4" and r["GROUP_RANK"] == r["RANK"] and
              r["TORCHELASTIC_RUN_ID"] == "none" for r in recs), "one world of 4", recs)
    check("srun started" not in text and "Slurm job step" not in text,
          "nothing said about Slurm at the default level", text)
    print(f"one ddprun per task after {time.monotonic() - t0:.1f} s")

    # node02 dies while the step runs. Slurm notices only after SlurmdTimeout (and, with
    # --no-kill, leaves the step running); the agents notice the missing heartbeats first.
    # srun itself ends once Slurm has declared node02 failed (docs/slurm.md, measured: it
    # exits 0); the test does not wait for that, only for the survivors' agents.
    out = os.path.join(c.dir, "out_kill")
    os.makedirs(out)
    proc, log = c.srun("kill", ["srun", "-N4", "--no-kill", c.ddprun, "--nnodes=3:4",
                                "--max-restarts=3", f"--rdzv-conf={FAST}", WORKER,
                                "--until-world", "3"], MN_OUT=out, LOGLEVEL="INFO")
    poll(lambda: len(blackbox.json_records(out)) >= 4, 150, "four workers running", c.logs)
    c.kill_node(1)
    poll(lambda: blackbox.read_text(log).count("all 1 local workers succeeded") >= 3, 150,
         "three survivors succeed", c.logs)
    check(proc.poll() in (None, 0), f"srun --no-kill exit {proc.poll()}", c.logs)
    recs = blackbox.json_records(out)
    finished = [r for r in recs if r["WORLD_SIZE"] == "3"]
    check(sorted(r["RANK"] for r in finished) == ["0", "1", "2"],
          "three survivors finish in a world of 3", recs, c.logs)
    check(all(r["MASTER_ADDR"] == Netns.addr(0) for r in finished), "rank 0 stays on node01",
          recs)
    print(f"node death handled after {time.monotonic() - t0:.1f} s")


# What srun gives task 1 of `srun -N4 --ntasks-per-node=1` in job 4242, step 0 (the names
# and forms of Slurm 22.05's task environment).
SRUN_TASK_ENV = {
    "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
    "SLURM_NNODES": "4", "SLURM_STEP_NUM_NODES": "4", "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "node[01-04]", "SLURM_STEP_NODELIST": "node[01-04]",
    "SLURM_NODELIST": "node[01-04]", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "1(x4)", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
}


@test(needs_torch=False)
def explicit_flags_pass_bad_slurm_values(c):
    """A task environment whose SLURM_STEP_NODELIST does not parse, or whose SLURM_NODEID is
    outside the step, does not stop a launch that gives every flag (one warning naming the
    variable, exit 0); without the flag the one error line asks only for the flags that
    are missing; SLURM_GPUS_ON_NODE beyond ddprun's limit names Slurm and the limit."""
    flags = ["--nnodes=1", "--node-rank=0", "--rdzv-backend=c10d",
             "--rdzv-endpoint=127.0.0.1:0", "--rdzv-id=mine", "--nproc-per-node=1"]
    marker = os.path.join(c.dir, "ran")
    for var, value in (("SLURM_STEP_NODELIST", "node[01-"), ("SLURM_STEP_NODELIST", "node[01-03]"),
                       ("SLURM_NODEID", "7"), ("SLURM_NODEID", "x")):
        env = blackbox.job_environment(TMPDIR=c.dir, **{**SRUN_TASK_ENV, var: value})
        code, out, err = c.run_process([c.ddprun, *flags, "--no-python", "touch", marker],
                                       env, 60)
        check(code == 0 and os.path.exists(marker), f"{var}={value}: the job runs, exit {code}",
              out, err)
        os.unlink(marker)
        warned = [line for line in err.splitlines() if var in line]
        check(len(warned) == 1 and "(not used: --" in warned[0] and "give --" not in err,
              f"{var}={value}: one warning naming it", err)

    env = blackbox.job_environment(TMPDIR=c.dir, **{**SRUN_TASK_ENV,
                                                    "SLURM_STEP_NODELIST": "node[01-"})
    code, out, err = c.run_process([c.ddprun, "--nnodes=4", "--node-rank=1", "--no-python",
                                    "true"], env, 60)
    check(code == 2, f"the node list is needed: exit 2, not {code}", err)
    check("SLURM_STEP_NODELIST" in err and "give --rdzv-endpoint, or --no-slurm" in err and
          "--node-rank," not in err and "--nnodes," not in err, "asks for the missing flag", err)

    env = blackbox.job_environment(TMPDIR=c.dir, **{**SRUN_TASK_ENV,
                                                    "SLURM_GPUS_ON_NODE": "100000"})
    code, out, err = c.run_process([c.ddprun, "--no-python", "true"], env, 60)
    check(code == 2 and "SLURM_GPUS_ON_NODE=100000" in err and "Slurm job step 4242.0" in err and
          "limit of 65536 workers per node" in err, "names Slurm and the limit", err)



@test(needs_torch=False)
def explicit_flags_pass_many_tasks(c):
    """A step with more tasks than nodes (srun -n 8 on 4 nodes) runs when the command line
    gives every option Slurm would fill: Slurm stands aside (issue 21); with the static
    backend --rdzv-id is not among them (issue 31). With one of them left to Slurm, the step
    is still refused in one line naming it (exit 2)."""
    flags = ["--nnodes=1", "--node-rank=0", "--rdzv-backend=c10d",
             "--rdzv-endpoint=127.0.0.1:0", "--rdzv-id=mine", "--nproc-per-node=1"]
    env = blackbox.job_environment(TMPDIR=c.dir, **{
        **SRUN_TASK_ENV, "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_STEP_TASKS_PER_NODE": "2(x4)"})
    marker = os.path.join(c.dir, "ran")
    code, out, err = c.run_process([c.ddprun, *flags, "--no-python", "touch", marker], env, 60)
    check(code == 0 and os.path.exists(marker), f"every option given: runs, exit {code}",
          out, err)
    check("tasks on" not in err, "no word about the tasks", err)
    code, out, err = c.run_process([c.ddprun, *flags[:-2], "--no-python", "true"], env, 60)
    refused = [line for line in err.splitlines() if "srun started 8 tasks on 4 nodes" in line]
    check(code == 2 and len(refused) == 1, f"--rdzv-id left to Slurm: refused, exit {code}",
          err)
    check(refused[0].endswith("for one ddprun per task, also give --rdzv-id --nproc-per-node)"),
          "naming what is missing", err)
    # The static backend needs no --rdzv-id (torchrun's one launcher per GPU, issue 31).
    static = ["--nnodes=1", "--node-rank=0", "--master-addr=127.0.0.1",
              f"--master-port={c.reserve_port()}", "--nproc-per-node=1"]
    os.unlink(marker)
    code, out, err = c.run_process([c.ddprun, *static, "--no-python", "touch", marker], env, 60)
    check(code == 0 and os.path.exists(marker), f"static, no --rdzv-id: runs, exit {code}",
          out, err)
    check("tasks on" not in err and "Slurm" not in err, "no word about Slurm", err)

if __name__ == "__main__":
    sys.exit(suite.main(sys.argv, SlurmCluster))
