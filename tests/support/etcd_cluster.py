"""etcd_cluster.py: a real etcd cluster (Debian's /usr/bin/etcd 3.4) on loopback for the
black-box etcd tests and the bench: n members, client and peer ports reserved by the
workspace until etcd binds them, one data dir each under the workspace, short election
timeouts; members killed with the workspace (they are its processes). A few helpers speak
etcd's v3 JSON gateway with urllib (the leader, a key, a prefix) so that tests observe the
rendezvous through etcd itself, as `etcdctl get --prefix` would.
"""
import base64
import json
import os
import signal
import urllib.request

import blackbox

ETCD = "/usr/bin/etcd"


def _b64(s):
    return base64.b64encode(s.encode()).decode()


class EtcdCluster:
    def __init__(self, ws, members=3):
        if not os.access(ETCD, os.X_OK):
            raise blackbox.Failed(f"{ETCD} missing (scripts/install-deps installs etcd-server)")
        self.ws = ws
        self.client = [ws.reserve_port() for _ in range(members)]
        peer = [ws.reserve_port() for _ in range(members)]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(peer))
        self.procs = []
        for i in range(members):
            d = os.path.join(ws.dir, f"etcd{i}")
            self.procs.append(ws.start_process([
                ETCD, f"--name=m{i}", f"--data-dir={d}",
                f"--listen-client-urls={self.url(i)}", f"--advertise-client-urls={self.url(i)}",
                f"--listen-peer-urls=http://127.0.0.1:{peer[i]}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer[i]}",
                f"--initial-cluster={initial}", "--initial-cluster-state=new",
                "--initial-cluster-token=ddprun-test", "--heartbeat-interval=100",
                "--election-timeout=1000"], os.environ.copy(), log=d + ".log"))
        for i in range(members):
            blackbox.poll(lambda: self._try(i, "/v3/kv/put",
                                            {"key": _b64("/ready"), "value": _b64("1")}),
                          60, f"etcd member {i} accepts writes", self.logs)

    def url(self, i):
        return f"http://127.0.0.1:{self.client[i]}"

    def endpoints(self):
        return ",".join(self.url(i) for i in range(len(self.client)))

    def logs(self):
        return "\n".join(f"=== etcd{i}\n" + blackbox.read_text(
            os.path.join(self.ws.dir, f"etcd{i}.log"))[-3000:] for i in range(len(self.client)))

    def alive(self):
        return [i for i, p in enumerate(self.procs) if p.poll() is None]

    def call(self, i, path, body):
        req = urllib.request.Request(self.url(i) + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def _try(self, i, path, body):
        try:
            return self.call(i, path, body)
        except OSError:
            return None

    def leader(self):
        """The index of the member that is the raft leader now (None while unknown)."""
        ids = {}
        leader = None
        for i in self.alive():
            st = self._try(i, "/v3/maintenance/status", {})
            if st and "leader" in st:
                ids[st["header"]["member_id"]] = i
                leader = st["leader"]
        return ids.get(leader)

    def kill(self, i):
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()

    def get_prefix(self, prefix):
        """{key: value} of every key under `prefix`, through any live member."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        for i in self.alive():
            r = self._try(i, "/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end)})
            if r is not None:
                return {base64.b64decode(kv["key"]).decode(): base64.b64decode(
                    kv.get("value", "")).decode() for kv in r.get("kvs", [])}
        return {}
