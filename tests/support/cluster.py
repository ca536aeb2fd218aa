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
