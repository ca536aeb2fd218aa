"""etcd_cluster.py: a real etcd cluster (Debian's /usr/bin/etcd 3.4) on loopback for the
black-box etcd tests and the bench: n members, client and peer ports reserved by the
workspace until etcd binds them, one data dir each under the workspace, short election
timeouts; members killed with the workspace (they are its processes). A few helpers speak
etcd's v3 JSON gateway with urllib (the leader, a key, a prefix) so that tests observe the
rendezvous through etcd itself; etcdctl() runs the real `etcdctl`.

With host= and prefix= the members listen on that address inside a network namespace
(prefix: the command prefix that enters it, tests/support/netns.py): the agents of the
namespaced hosts reach them there, this process does not, so readiness, etcdctl() and
leader() go through the prefix and the other HTTP helpers are not for such a cluster.
hosts= and prefixes= (one per member) put each member on a host of its own, so that a
fault can cut one member from the others.

With tls=True the members serve https client URLs with certificates made by make_tls()
(the `openssl` CLI, EC P-256 keys) and require client certificates (--client-cert-auth);
peer URLs stay plain.
"""
import base64
import json
import os
import signal
import ssl
import subprocess
import types
import urllib.request

import blackbox

ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"


def make_tls(directory):
    """Certificates for a TLS etcd on 127.0.0.1, made with the openssl CLI in `directory`:
    ca (the CA: ca.pem), server (server.pem/.key, subjectAltName IP:127.0.0.1 only, so
    https://localhost:... must be refused), client (client.pem/.key, signed by ca), other_ca
    (other_ca.pem: a second CA) and stranger (stranger.pem/.key: a client certificate
    signed by other_ca). Paths as attributes (ca_pem, client_key, ...)."""
    os.makedirs(directory, exist_ok=True)
    names = ("ca", "other_ca", "server", "client", "stranger")
    f = types.SimpleNamespace(**{f"{n}_{ext}": os.path.join(directory, f"{n}.{ext}")
                                 for n in names for ext in ("pem", "key")})
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args):
        r = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=directory)
        if r.returncode != 0:
            raise blackbox.Failed(f"openssl {' '.join(args)} failed", r.stderr)

    for ca in ("ca", "other_ca"):
        openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                "-subj", f"/CN=ddprun test {ca}")
    for serial, (name, ca, ext) in enumerate((
            ("server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
            ("client", "ca", "extendedKeyUsage=clientAuth"),
            ("stranger", "other_ca", "extendedKeyUsage=clientAuth")), 1):
        with open(os.path.join(directory, f"{name}.ext"), "w") as out:
            out.write(ext + "\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN=ddprun test {name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem",
                "-extfile", f"{name}.ext")
    return f


def _b64(s):
    return base64.b64encode(s.encode()).decode()


class EtcdCluster:
    def __init__(self, ws, members=3, tls=False, host="127.0.0.1", prefix=(), hosts=None,
                 prefixes=None):
        if not os.access(ETCD, os.X_OK):
            raise blackbox.Failed(f"{ETCD} missing (scripts/install-deps installs etcd-server)")
        self.ws = ws
        self.hosts = list(hosts) if hosts else [host] * members
        self.prefixes = [list(p) for p in prefixes] if prefixes else [list(prefix)] * members
        self.prefix = self.prefixes[0]  # etcdctl() runs there
        self.tls = make_tls(os.path.join(ws.dir, "tls")) if tls else None
        tls_flags = [f"--cert-file={self.tls.server_pem}", f"--key-file={self.tls.server_key}",
                     f"--trusted-ca-file={self.tls.ca_pem}", "--client-cert-auth"] if tls else []
        self._ssl = None
        if tls:
            self._ssl = ssl.create_default_context(cafile=self.tls.ca_pem)
            self._ssl.load_cert_chain(self.tls.client_pem, self.tls.client_key)
        self.client = [ws.reserve_port() for _ in range(members)]
        peer = [ws.reserve_port() for _ in range(members)]
        initial = ",".join(f"m{i}=http://{self.hosts[i]}:{p}" for i, p in enumerate(peer))
        self.procs = []
        for i in range(members):
            d = os.path.join(ws.dir, f"etcd{i}")
            self.procs.append(ws.start_process([
                *self.prefixes[i], ETCD, f"--name=m{i}", f"--data-dir={d}",
                f"--listen-client-urls={self.url(i)}", f"--advertise-client-urls={self.url(i)}",
                f"--listen-peer-urls=http://{self.hosts[i]}:{peer[i]}",
                f"--initial-advertise-peer-urls=http://{self.hosts[i]}:{peer[i]}",
                f"--initial-cluster={initial}", "--initial-cluster-state=new",
                "--initial-cluster-token=ddprun-test", "--heartbeat-interval=100",
                "--election-timeout=1000", *tls_flags], os.environ.copy(), log=d + ".log"))
        for i in range(members):
            blackbox.poll(lambda: self._ready(i), 60, f"etcd member {i} accepts writes",
                          self.logs)

    def _ready(self, i):
        if not self.prefixes[i]:
            return self._try(i, "/v3/kv/put", {"key": _b64("/ready"), "value": _b64("1")})
        return self._ctl(i, "put", "/ready", "1") is not None

    def _ctl(self, i, *args):
        """etcdctl (v3 API, no TLS) against member i, run where it lives: its stdout, or None
        when it fails or times out."""
        try:
            r = subprocess.run([*self.prefixes[i], ETCDCTL, f"--endpoints={self.url(i)}",
                                "--command-timeout=3s", *args], capture_output=True, text=True,
                               timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        except subprocess.TimeoutExpired:
            return None
        return r.stdout if r.returncode == 0 else None

    def url(self, i):
        return f"{'https' if self.tls else 'http'}://{self.hosts[i]}:{self.client[i]}"

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
        with urllib.request.urlopen(req, timeout=5, context=self._ssl) as r:
            return json.loads(r.read())

    def _try(self, i, path, body):
        try:
            return self.call(i, path, body)
        except OSError:
            return None

    def status(self, i):
        """Member i's own view: {"member_id", "leader"} (ids as decimal strings; leader "0"
        while it knows none), or None when it does not answer."""
        if not self.prefixes[i]:
            st = self._try(i, "/v3/maintenance/status", {})
            return st and {"member_id": st["header"]["member_id"], "leader": st.get("leader", "0")}
        out = self._ctl(i, "endpoint", "status", "-w", "json")
        if out is None:
            return None
        st = json.loads(out)[0]["Status"]
        return {"member_id": str(st["header"]["member_id"]), "leader": str(st.get("leader", 0))}

    def leader(self, among=None):
        """The index of the member that is the raft leader now, as the members `among` (all
        live ones by default) see it; None while unknown."""
        ids = {}
        leader = None
        for i in self.alive() if among is None else among:
            st = self.status(i)
            if st and st["leader"] != "0":
                ids[st["member_id"]] = i
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

    def etcdctl(self, *args):
        """Runs `etcdctl` (v3 API) against the live members with this cluster's client
        certificate: its stdout; fails the test when it fails."""
        argv = [ETCDCTL, "--endpoints=" + ",".join(self.url(i) for i in self.alive())]
        if self.tls:
            argv += [f"--cacert={self.tls.ca_pem}", f"--cert={self.tls.client_pem}",
                     f"--key={self.tls.client_key}"]
        r = subprocess.run([*self.prefix, *argv, *args], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "ETCDCTL_API": "3"})
        if r.returncode != 0:
            raise blackbox.Failed(f"etcdctl {' '.join(args)}: exit {r.returncode}", r.stderr)
        return r.stdout
