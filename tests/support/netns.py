"""netns.py: network namespaces as separate test hosts, shared by the black-box suites
(tests/multinode, and any suite that needs real separate network stacks).

Netns(n) creates a hub namespace with a bridge and n node namespaces joined to it by veth
pairs; node i has 10.213.0.<i+1>/24 on interface mn0. Optionally each node also gets a
host name of its own (a UTS namespace per command: Netns(n, hostnames=[...])) and a hosts
file of its own (set_hosts(i, text): bind-mounted over /etc/hosts in a mount namespace
per command; the machine's /etc is never written). Every address lives inside
namespaces the test creates (no default route, nothing reaches the outside); close()
deletes them, and the next Netns deletes those a killed test left behind.
netns_or_skip(n) raises blackbox.Skip where namespaces cannot be made (not root, no ip).

Named hosts (the Slurm suite): Netns(n, hub_address=True) also gives the hub's bridge
HUB_ADDR (a head node: a controller, a login shell); write_hosts(path, names) writes one
hosts file for all of them, and host_prefix(i, name, hosts) / hub_prefix(name, hosts) run a
command as that host: in its network namespace, with its own hostname (UTS namespace)
and the hosts file bind-mounted over /etc/hosts in a private mount namespace (nothing
outside the command sees either).

Faults (issue 33), always silent (packets vanish; never a reject, never a reset), and only
ever inside the test's own namespaces: isolate(i) drops everything on node i's link,
drop(i, j, direction) cuts node i from node j one way or both (nft rules in node i's
namespace), heal(i) removes node i's rules, cut(i)/uncut(i) take its link down and up at
the bridge (flap(i, ...) repeats that in a thread), rate_limit(i, rate) shapes its link
both ways with tc's tbf, reboot(i) kills what runs on node i and re-creates its namespace
with the same address (its peers' connections to it stay half-open).
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from blackbox import Skip

# Every address lives inside namespaces this test creates (10.213.0.0/24, no default
# route, nothing reaches the outside); they are deleted at the end.

class Netns:
    """A hub namespace with a bridge, and one namespace per node attached to it by a veth
    pair; node i has 10.213.0.<i+1>/24 on interface mn0."""

    HUB_ADDR = "10.213.0.254"

    def __init__(self, nodes, hostnames=None, hub_address=False):
        self.remove_stale()
        # Per node: the host name its commands see (None: the machine's), and the hosts
        # file they see as /etc/hosts (None: the machine's).
        self.hostnames = list(hostnames) if hostnames else [None] * nodes
        self.hosts_files = [None] * nodes
        self.files = None  # temporary directory of the hosts files
        self.tag = f"ddp{os.getpid()}"
        self.hub = self.tag + "h"
        self.nodes = [f"{self.tag}n{i}" for i in range(nodes)]
        self.created = []
        self._flapping = None  # (thread, stop event) of flap()
        try:
            self._ip("netns", "add", self.hub)
            self.created.append(self.hub)
            self._in(self.hub, "ip", "link", "add", "br0", "type", "bridge")
            self._in(self.hub, "ip", "link", "set", "br0", "up")
            if hub_address:
                self._in(self.hub, "ip", "link", "set", "lo", "up")
                self._in(self.hub, "ip", "addr", "add", f"{self.HUB_ADDR}/24", "dev", "br0")
            for i, ns in enumerate(self.nodes):
                self._ip("netns", "add", ns)
                self.created.append(ns)
                self._add_node(i)
        except Exception:
            self.close()
            raise

    def _add_node(self, i):
        """Node i's loopback, its veth pair into the bridge and its address (its namespace
        exists)."""
        ns = self.nodes[i]
        self._in(ns, "ip", "link", "set", "lo", "up")
        self._in(self.hub, "ip", "link", "add", f"vh{i}", "type", "veth", "peer", "name", "mn0",
                 "netns", ns)
        self._in(self.hub, "ip", "link", "set", f"vh{i}", "master", "br0")
        self._in(self.hub, "ip", "link", "set", f"vh{i}", "up")
        self._in(ns, "ip", "addr", "add", f"{self.addr(i)}/24", "dev", "mn0")
        self._in(ns, "ip", "link", "set", "mn0", "up")

    @staticmethod
    def remove_stale():
        """Deletes namespaces this test left behind when it was killed (ddp<pid>h/n<i>,
        pid gone), and ends the processes still running in them."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            m = re.fullmatch(r"ddp(\d+)(h|n\d+)", name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                # What still runs inside (daemons that left the test's sessions, such as
                # slurmstepd) would keep the namespace alive: end it first.
                pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                      text=True).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                subprocess.run(["ip", "netns", "del", name], capture_output=True)

    @staticmethod
    def addr(i):
        return f"10.213.0.{i + 1}"

    @staticmethod
    def _ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def _in(self, ns, *cmd):
        subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True, capture_output=True,
                       text=True)

    def cut(self, i):
        """Takes node i's link down at the bridge: its peers' packets vanish silently."""
        self._in(self.hub, "ip", "link", "set", f"vh{i}", "down")

    def uncut(self, i):
        """Brings node i's link up again at the bridge."""
        self._in(self.hub, "ip", "link", "set", f"vh{i}", "up")

    def flap(self, i, period, duration):
        """Takes node i's link down and up every `period` seconds for `duration` seconds, in
        a thread (wait_flap() joins it); the link ends up."""
        stop = threading.Event()

        def run():
            end = time.monotonic() + duration
            while time.monotonic() < end and not stop.is_set():
                self.cut(i)
                stop.wait(period)
                self.uncut(i)
                stop.wait(period)
            self.uncut(i)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self._flapping = (t, stop)

    def wait_flap(self):
        if self._flapping:
            t, stop = self._flapping
            t.join()
            self._flapping = None

    # The fault table: one nft table per node namespace, input and output chains that
    # drop (silently) what the rules name. heal() deletes it.
    _TABLE = "ddpfault"

    def _nft(self, i, *rules):
        base = (f"table inet {self._TABLE} {{\n"
                "  chain in { type filter hook input priority 0; policy accept; }\n"
                "  chain out { type filter hook output priority 0; policy accept; }\n}\n")
        script = base + "".join(f"add rule inet {self._TABLE} {r}\n" for r in rules)
        subprocess.run(["ip", "netns", "exec", self.nodes[i], "nft", "-f", "-"], input=script,
                       check=True, capture_output=True, text=True)

    def isolate(self, i):
        """Node i's link drops everything, both ways (its loopback still works)."""
        self._nft(i, 'in iifname "mn0" drop', 'out oifname "mn0" drop')

    def drop(self, i, j, direction="both"):
        """Node i no longer hears node j ("in"), no longer reaches it ("out"), or both."""
        rules = []
        if direction in ("in", "both"):
            rules.append(f"in ip saddr {self.addr(j)} drop")
        if direction in ("out", "both"):
            rules.append(f"out ip daddr {self.addr(j)} drop")
        if not rules:
            raise ValueError(f"direction {direction!r}: in, out or both")
        self._nft(i, *rules)

    def heal(self, i):
        """Removes node i's drop rules (none: nothing happens)."""
        subprocess.run(["ip", "netns", "exec", self.nodes[i], "nft", "delete", "table", "inet",
                        self._TABLE], capture_output=True)

    def rate_limit(self, i, rate="1mbit"):
        """Shapes node i's link to `rate` both ways (tc tbf at both ends of its veth)."""
        for ns, dev in ((self.hub, f"vh{i}"), (self.nodes[i], "mn0")):
            self._in(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                     "burst", "32kbit", "latency", "400ms")

    def reboot(self, i):
        """Node i goes away without a word (SIGKILL to everything in its namespace, the
        namespace deleted) and comes back empty with the same address: the connections
        its peers had to it stay half-open until they probe them."""
        self.cut(i)  # first: nothing leaves while its processes die (no FIN, no RST)
        for pid in self.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", self.nodes[i]], capture_output=True)
        subprocess.run(["ip", "netns", "exec", self.hub, "ip", "link", "del", f"vh{i}"],
                       capture_output=True)
        self._ip("netns", "add", self.nodes[i])
        self._add_node(i)

    def set_hosts(self, i, text):
        """Node i's commands started from now on see `text` as /etc/hosts."""
        if self.files is None:
            self.files = tempfile.mkdtemp(prefix="ddprun_netns_")
        path = os.path.join(self.files, f"hosts{i}")
        with open(path, "w") as f:
            f.write(text)
        self.hosts_files[i] = path

    def prefix(self, i):
        """The command prefix that runs a command on node i (with its host name and hosts
        file, when it has them)."""
        return self._enter(self.nodes[i], self.hostnames[i], self.hosts_files[i])

    def write_hosts(self, path, names, hub_name=None):
        """A hosts file: localhost, names[i] at node i's address, hub_name at HUB_ADDR."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{self.addr(i)} {n}" for i, n in enumerate(names)]
        if hub_name:
            lines.append(f"{self.HUB_ADDR} {hub_name}")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    @staticmethod
    def _enter(ns, name=None, hosts=None):
        """The one way into a namespace: `ip netns exec`, or, for a host name or hosts
        file of its own, nsenter (`ip netns exec` remounts /sys, which hides the cgroup
        mounts slurmd needs) then unshare: a UTS namespace for the name and a private mount
        namespace for the hosts file bind-mounted over /etc/hosts; both stay inside the
        command. unshare without --fork execs in place: the command keeps its pid."""
        if name is None and hosts is None:
            return ["ip", "netns", "exec", ns]
        script = ('if [ -n "$1" ]; then hostname "$1" || exit 1; fi; '
                  'if [ -n "$2" ]; then mount --bind "$2" /etc/hosts || exit 1; fi; '
                  'shift 2; exec "$@"')
        return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", script, "netns-host", name or "",
                hosts or ""]

    def host_prefix(self, i, name, hosts):
        """Runs a command as host `name` in node i's namespace (see the module doc)."""
        return self._enter(self.nodes[i], name, hosts)

    def hub_prefix(self, name=None, hosts=None):
        """Runs a command as host `name` (None: the machine's name and hosts file) in the hub
        namespace (Netns(hub_address=True))."""
        return self._enter(self.hub, name, hosts)

    def pids(self, i):
        """The processes in node i's network namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.nodes[i]], capture_output=True,
                             text=True).stdout
        return [int(p) for p in out.split()]

    def close(self):
        if self._flapping:
            self._flapping[1].set()
            self.wait_flap()
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []
        if self.files is not None:
            shutil.rmtree(self.files, ignore_errors=True)
            self.files = None


def netns_or_skip(nodes, hostnames=None, hub_address=False):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise Skip("network namespaces need root and iproute2")
    if hostnames and shutil.which("unshare") is None:
        raise Skip("host names per node need unshare (util-linux)")
    try:
        return Netns(nodes, hostnames, hub_address)
    except (subprocess.CalledProcessError, OSError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise Skip(f"cannot create network namespaces here: {detail.strip()}")
