"""netns.py: network namespaces as separate test hosts, shared by the black-box suites
(tests/multinode, and any suite that needs real separate network stacks).

Netns(n) creates a hub namespace with a bridge and n node namespaces joined to it by veth
pairs; node i has 10.213.0.<i+1>/24 on interface mn0. Every address lives inside
namespaces the test creates (no default route, nothing reaches the outside); close()
deletes them, and the next Netns deletes those a killed test left behind.
netns_or_skip(n) raises blackbox.Skip where namespaces cannot be made (not root, no ip).
"""
import os
import re
import shutil
import subprocess

from blackbox import Skip

# Every address lives inside namespaces this test creates (10.213.0.0/24, no default
# route, nothing reaches the outside); they are deleted at the end.

class Netns:
    """A hub namespace with a bridge, and one namespace per node attached to it by a veth
    pair; node i has 10.213.0.<i+1>/24 on interface mn0."""

    def __init__(self, nodes):
        self.remove_stale()
        self.tag = f"ddp{os.getpid()}"
        self.hub = self.tag + "h"
        self.nodes = [f"{self.tag}n{i}" for i in range(nodes)]
        self.created = []
        try:
            self._ip("netns", "add", self.hub)
            self.created.append(self.hub)
            self._in(self.hub, "ip", "link", "add", "br0", "type", "bridge")
            self._in(self.hub, "ip", "link", "set", "br0", "up")
            for i, ns in enumerate(self.nodes):
                self._ip("netns", "add", ns)
                self.created.append(ns)
                self._in(ns, "ip", "link", "set", "lo", "up")
                self._in(self.hub, "ip", "link", "add", f"vh{i}", "type", "veth", "peer",
                         "name", "mn0", "netns", ns)
                self._in(self.hub, "ip", "link", "set", f"vh{i}", "master", "br0")
                self._in(self.hub, "ip", "link", "set", f"vh{i}", "up")
                self._in(ns, "ip", "addr", "add", f"{self.addr(i)}/24", "dev", "mn0")
                self._in(ns, "ip", "link", "set", "mn0", "up")
        except Exception:
            self.close()
            raise

    @staticmethod
    def remove_stale():
        """Deletes namespaces this test left behind when it was killed (ddp<pid>h/n<i>,
        pid gone)."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            m = re.fullmatch(r"ddp(\d+)(h|n\d+)", name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
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

    def prefix(self, i):
        return ["ip", "netns", "exec", self.nodes[i]]

    def close(self):
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []


def netns_or_skip(nodes):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise Skip("network namespaces need root and iproute2")
    try:
        return Netns(nodes)
    except (subprocess.CalledProcessError, OSError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise Skip(f"cannot create network namespaces here: {detail.strip()}")
