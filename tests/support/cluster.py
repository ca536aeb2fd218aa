"""cluster.py: several `ddprun` agents of one test on one machine, each in its own session
with its own output directory and log (Agent), in one blackbox.Workspace (Cluster). Used
by tests/multinode/multinode_test.py and etcd_test.py. Agents run the shared rank worker
tests/multinode/workers/mn_worker.py (WORKER, or `script`), which records each rank's run
as JSON.
"""
import os
import signal
import subprocess

import blackbox
from blackbox import Failed

JOB_WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "multinode", "workers", "job_worker.py")
WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "multinode", "workers", "mn_worker.py")


class Agent:
    def __init__(self, cluster, name, args, worker_args, prefix=(), gloo_ifname=True,
                 script=WORKER, env=None):
        self.name = name
        self.out = os.path.join(cluster.dir, name)
        os.makedirs(self.out, exist_ok=True)
        self.log = os.path.join(cluster.dir, name + ".log")
        # The output directory goes by environment: every node runs the same command.
        env_extra = env
        env = blackbox.job_environment(drop=(*blackbox.LAUNCHER_VARIABLES, "MASTER_"),
                                       TMPDIR=cluster.dir, MN_OUT=self.out)
        env.update(env_extra or {})
        if prefix and gloo_ifname:
            env["GLOO_SOCKET_IFNAME"] = "mn0"  # gloo would resolve the host name otherwise
        self.proc = cluster.start_process([*prefix, cluster.ddprun, *args, script, *worker_args],
                                          env, log=self.log, new_session=True)

    def records(self):
        return blackbox.json_records(self.out)

    def text(self):
        return blackbox.read_text(self.log)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"{self.name} still running after {timeout} s\n--- {self.text()}")

    def kill(self, sig=signal.SIGKILL):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass


def venv_without_torch(c):
    """A virtual environment of the tier's interpreter without torch (no system site
    packages) in workspace `c`: the python of an activated env that lacks it, as users meet
    it (the pre-flight tests' bad node)."""
    path = os.path.join(c.dir, "venv_without_torch")
    subprocess.run([blackbox.PYTHON, "-m", "venv", "--without-pip", path], check=True)
    return os.path.join(path, "bin", "python")


def left_out_then_started_again(c, launch):
    """Issue 34's returning bad node, for either backend: `launch(i, extra)` gives node i's
    arguments. Nodes 0-2 with --nnodes 2:3 --preflight, node1's python without torch: node1
    is left out (exit 3), the others train; node1 started again is refused at its first
    join (exit 3, one line naming why). Returns (agents, the restarted node's agent)."""
    extra = ["--preflight", "--exit-codes=classes", "--max-restarts=0"]
    bad = {"PYTHON_EXEC": venv_without_torch(c)}
    wargs = ["--steps", "60", "--step-sleep", "0.1"]
    agents = [c.start(f"node{i}", launch(i, extra), wargs, env=bad if i == 1 else None)
              for i in range(3)]
    blackbox.check(agents[1].wait(120) == 3, "node1 exits 3 (infrastructure)", c.logs())
    blackbox.poll(lambda: agents[0].records() and agents[2].records(), 90, "the others train",
                  c.logs)
    again = c.start("node1_again", launch(1, extra), wargs, env=bad)
    blackbox.check(again.wait(60) == 3, "the node started again exits 3", again.text())
    blackbox.check("was left out of this job by the pre-flight check (import torch: "
                   "ModuleNotFoundError" in again.text(), "one line naming why", again.text())
    return agents, again


def straggler_left_out(c, launch):
    """Issue 34's --exclude-stragglers, for either backend: `launch(i, extra)` gives node i's
    arguments. 3 nodes x 1 rank, --nnodes 2:3, --straggler-window 2; rank 2 (node 2,
    127.0.0.3) late before each all_reduce (job_worker.py straggle-out 3). Node 0 names it 3
    rankings in a row and leaves its node out: node 2 exits 1 saying why, its address goes
    on the --blocklist; nodes 0 and 1 go on in a new round of 2 nodes, no restart spent."""
    blocklist = os.path.join(c.dir, "blocklist")
    extra = ["--stall-timeout=60", "--straggler-window=2", "--exclude-stragglers",
             "--max-restarts=0", f"--blocklist={blocklist}"]
    agents = [c.start(f"node{i}", launch(i, extra), ["straggle-out", "3"], script=JOB_WORKER,
                      env={"LOGLEVEL": "INFO"})
              for i in range(3)]
    for a in agents:
        a.wait(150)
    rcs = [a.proc.returncode for a in agents]
    blackbox.check(rcs == [0, 0, 1], f"nodes 0 and 1 succeed, node 2 leaves: {rcs}", c.logs())
    text0, text2 = agents[0].text(), agents[2].text()
    blackbox.check("straggler: leaving rank 2 on localhost (127.0.0.3) out of the job: the "
                   "straggler in 3 rankings in a row" in text0, "node 0 says whom it leaves out",
                   c.logs())
    blackbox.check("this node leaves the job as a straggler (--exclude-stragglers; node 0's "
                   "ranking: straggler: rank 2 on localhost (127.0.0.3) arrived last at " in text2,
                   "node 2 says why it leaves", c.logs())
    for a in agents[:2]:
        blackbox.check(" formed: 2 nodes" in a.text() and "restarts spent 0" in a.text(),
                       f"{a.name}: a new round of 2 nodes, no restart spent", c.logs())
    with open(blocklist) as f:
        blackbox.check("127.0.0.3" in f.read(), "node 2's address on the block-list", c.logs())


def stall_verdict_of(c, agents, rc=None):
    """Issue 32's job-wide stall verdict as a job's nodes printed it: waits for each agent
    to exit (with `rc`, else any failure), checks each printed a verdict and that all are
    the same, and returns its headline (from "stall (job-wide): ")."""
    heads = []
    for a in agents:
        code = a.wait(120)
        blackbox.check(code == rc if rc is not None else code != 0,
                       f"{a.name} must fail" + (f" with {rc}" if rc is not None else ""), c.logs())
        lines = [l for l in a.text().splitlines() if "stall (job-wide): " in l]
        blackbox.check(lines, f"{a.name}: no verdict", c.logs())
        heads.append(lines[0][lines[0].index("stall (job-wide): "):])
    blackbox.check(len(set(heads)) == 1, "the same verdict on every node", heads)
    return heads[0]


class Cluster(blackbox.Workspace):
    def __init__(self, ddprun):
        super().__init__(ddprun, "ddprun_mn_")
        self.agents = []

    def start(self, name, args, worker_args=(), prefix=(), gloo_ifname=True, script=WORKER,
              env=None):
        """`env`: more environment for this agent (PYTHON_EXEC of its own, ...)."""
        a = Agent(self, name, args, list(worker_args), prefix, gloo_ifname, script, env)
        self.agents.append(a)
        return a

    def logs(self):
        return "\n".join(f"=== {a.name} (rc {a.proc.poll()})\n{a.text()}" for a in self.agents)
