"""A CPU-throttled "host" for multi-node tests (issue 34: a slow node): a cgroup whose
processes share `fraction` of one CPU, by the kernel's CFS bandwidth control: cgroup v2's
cpu.max where the unified hierarchy has the cpu controller, else cgroup v1's
cpu.cfs_quota_us. A process joins it through `prefix()` (an exec wrapper, so the agent and
everything it starts are inside from their first instruction). Needs root and one of the
two; raises blackbox.Skip otherwise. close() removes the cgroup once its processes ended."""

import os
import time

import blackbox

V2 = "/sys/fs/cgroup"
V2_UNIFIED = "/sys/fs/cgroup/unified"  # a hybrid system's v2 mount
V1_CPU = "/sys/fs/cgroup/cpu"
PERIOD_US = 100000


def _v2_root():
    for root in (V2, V2_UNIFIED):
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if "cpu" in f.read().split():
                    return root
        except OSError:
            pass
    return None


class CpuLimit:
    def __init__(self, name, fraction):
        quota = max(1000, int(PERIOD_US * fraction))
        root = _v2_root()
        if root is not None:
            with open(os.path.join(root, "cgroup.subtree_control")) as f:
                if "cpu" not in f.read().split():
                    raise blackbox.Skip(f"{root}: the cpu controller is not enabled for children")
            self.dir = os.path.join(root, name)
            os.makedirs(self.dir, exist_ok=True)
            with open(os.path.join(self.dir, "cpu.max"), "w") as f:
                f.write(f"{quota} {PERIOD_US}")
            self.kind = "cgroup v2 cpu.max"
        elif os.path.exists(os.path.join(V1_CPU, "cpu.cfs_quota_us")):
            self.dir = os.path.join(V1_CPU, name)
            try:
                os.makedirs(self.dir, exist_ok=True)
            except OSError as e:
                raise blackbox.Skip(f"cannot create a cpu cgroup: {e}")
            with open(os.path.join(self.dir, "cpu.cfs_period_us"), "w") as f:
                f.write(str(PERIOD_US))
            with open(os.path.join(self.dir, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(quota))
            self.kind = "cgroup v1 cpu.cfs_quota_us"
        else:
            raise blackbox.Skip("no cgroup cpu controller (v2 cpu.max or v1 cfs quota) here")

    def prefix(self):
        """An argv prefix that runs the rest of the command inside the cgroup."""
        procs = os.path.join(self.dir, "cgroup.procs")
        return ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "cpu-limited"]

    def close(self):
        # The cgroup goes once empty; processes of the test still ending get a moment.
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
