#!/usr/bin/env python3
"""Black-box tests of `--rdzv-backend=etcd-v3` with a real 3-member etcd 3.4 cluster on
loopback (tests/support/etcd_cluster.py) and real PyTorch gloo workers (the multinode
suite's agents and worker, each agent on its own 127.0.0.<n>).

    etcd_test.py <path to ddprun> <test name>     (ctest runs one test per process)
    etcd_test.py <path to ddprun> --list

The torch tests exit 77 (skipped) when $DDPRUN_TEST_PYTHON lacks torch; the bad-input test
needs neither torch nor etcd. Waits are polls with generous deadlines.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
import blackbox  # noqa: E402
from blackbox import check, poll  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from multinode_test import Cluster  # noqa: E402

suite = blackbox.Suite(__doc__, needs_torch=True)
test = suite.test
# A lease of 5 s renewed every second; a lost cluster is given up after 8 s.
CONF = ("keep_alive_interval=1,keep_alive_max_attempt=5,last_call_timeout=1.5,"
        "join_timeout=90,failover_timeout=8")
PREFIX = "/ddprun/rdzv/"


def etcd_args(i, endpoints, nnodes, run_id, extra=(), conf=CONF):
    return [f"--nnodes={nnodes}", "--nproc-per-node=1", f"--rdzv-id={run_id}",
            "--rdzv-backend=etcd-v3", f"--rdzv-endpoint={endpoints}",
            f"--local-addr=127.0.0.{i + 1}", f"--rdzv-conf={conf}", *extra]


def state(etcd, run_id):
    """The round state of `run_id` as the agents keep it in etcd ({} while absent)."""
    text = etcd.get_prefix(PREFIX + run_id + "/").get(PREFIX + run_id + "/state")
    return json.loads(text) if text else {}


def kill_leader(etcd):
    leader = poll(lambda: (etcd.leader(),) if etcd.leader() is not None else None, 30,
                  "an etcd leader", etcd.logs)[0]
    etcd.kill(leader)
    return leader


@test
def etcd_four_nodes_leader_killed(c):
    """4 agents, --nnodes=4 with --node-rank honoured: the etcd leader is SIGKILLed while
    three agents wait for the fourth; the job completes on the two remaining members, and
    `etcdctl get --prefix` shows the documented layout."""
    etcd = EtcdCluster(c, 3)
    eps = etcd.endpoints()
    agents = [c.start(f"node{i}", etcd_args(i, eps, 4, "etcd4", [f"--node-rank={3 - i}"]))
              for i in range(3)]
    poll(lambda: len(state(etcd, "etcd4").get("members", [])) == 3, 90,
         "three agents in round 0", c.logs, etcd.logs)
    kill_leader(etcd)
    agents.append(c.start("node3", etcd_args(3, eps, 4, "etcd4", ["--node-rank=0"])))
    for a in agents:
        check(a.wait(150) == 0, f"{a.name} failed", c.logs, etcd.logs)
    for i, a in enumerate(agents):
        (r,) = a.records()
        check(r["allreduce_ok"], "all_reduce wrong", r)
        check(r["GROUP_RANK"] == str(3 - i) and r["WORLD_SIZE"] == "4",
              f"{a.name}: GROUP_RANK {r['GROUP_RANK']} != node rank {3 - i}", r)
        check(r["MASTER_ADDR"] == "127.0.0.4", "MASTER_ADDR is group rank 0's --local-addr", r)
    keys = etcd.get_prefix(PREFIX + "etcd4/")
    check(state(etcd, "etcd4")["status"] == "final", "round state final", keys)
    for k in ("closed", "job", "r0/master"):
        check(PREFIX + "etcd4/" + k in keys, f"key {k}", keys)
    check(not [k for k in keys if "/node/" in k], "leases revoked at exit", keys)


@test
def etcd_store_host_killed_then_all_members_gone(c):
    """--nnodes=2:4 with three agents: mid-run the etcd leader is killed, then the agent
    hosting the workers' store (group rank 0): the two survivors re-rendezvous into a
    world of 2 and run on. Then the two remaining etcd members are killed: both agents
    exit non-zero within the failover timeout, naming the endpoints, and leave no worker
    behind. (One cluster and one set of workers for both stories: the suite's time.)"""
    etcd = EtcdCluster(c, 3)
    eps = etcd.endpoints()
    # World 2 must be reached (--until-world 2), then the workers step for 20 s more.
    wargs = ["--until-world", "2", "--steps", "400", "--step-sleep", "0.05"]
    conf = CONF.replace("failover_timeout=8", "failover_timeout=4")
    agents = [c.start(f"node{i}", etcd_args(i, eps, "2:4", "etcdkill", ["--max-restarts=3"],
                                            conf), wargs) for i in range(3)]
    poll(lambda: all(a.records() for a in agents), 90, "three nodes running", c.logs, etcd.logs)
    check(all(a.records()[0]["WORLD_SIZE"] == "3" for a in agents), "first world is 3", c.logs)
    kill_leader(etcd)
    (host,) = [a for a in agents if a.records()[0]["GROUP_RANK"] == "0"]
    host.kill()
    survivors = [a for a in agents if a is not host]
    poll(lambda: all(any(r["WORLD_SIZE"] == "2" for r in a.records()) for a in survivors), 90,
         "the survivors run in a world of 2", c.logs, etcd.logs)
    for a in survivors:
        check(all(r["allreduce_ok"] for r in a.records()), f"{a.name}: all_reduce", c.logs)
    for i in etcd.alive():
        etcd.kill(i)
    for a in survivors:
        check(a.wait(60) != 0, f"{a.name} must fail once etcd is gone", c.logs)
        check("no member answered" in a.text() and all(etcd.url(i) in a.text() for i in range(3)),
              f"{a.name}: the error names the endpoints", c.logs)
        for r in a.records():
            check(not os.path.exists(f"/proc/{r['pid']}"), f"worker {r['pid']} left behind",
                  c.logs)


@test(needs_torch=False)
def etcd_bad_input(c):
    """Unreachable endpoints fail within failover_timeout naming them; a malformed
    prefix, a missing TLS file or a bad URL is a one-line usage error (exit 2); torchrun's
    `etcd` name is etcd-v3 with one notice."""
    dead = [f"127.0.0.1:{c.reserve_port()}" for _ in range(2)]
    env = blackbox.job_environment()

    def run(backend="etcd-v3", endpoint=",".join(dead), conf="failover_timeout=2"):
        return c.run_process([c.ddprun, "--nnodes=2", "--rdzv-id=bad", f"--rdzv-backend={backend}",
                              f"--rdzv-endpoint={endpoint}", f"--rdzv-conf={conf}",
                              "--no-python", "true"], env, 60)

    start = time.monotonic()
    rc, out, err = run(backend="etcd")
    check(rc == 1, f"unreachable: exit {rc}", out, err)
    check(all(f"http://{d}" in err for d in dead) and "no member answered" in err,
          "the error names every endpoint", err)
    check(err.count("using etcd-v3") == 1, "one notice for the etcd alias", err)
    check(time.monotonic() - start < 45, "gave up within the failover timeout", err)
    for conf, what in [("etcd_prefix=nope", "etcd_prefix='nope'"),
                       ("cacert=/nonexistent/ca.pem", "cacert='/nonexistent/ca.pem'"),
                       ("cert=/nonexistent/c.pem,key=/nonexistent/k.pem", "cert='/nonexistent")]:
        rc, out, err = run(conf=conf)
        check(rc == 2, f"{conf}: exit {rc}", out, err)
        lines = [ln for ln in err.splitlines() if ln.startswith("ddprun: error:")]
        check(len(lines) == 1 and what in lines[0], f"{conf}: one line naming it", err)
    rc, out, err = run(endpoint="ftp://127.0.0.1:1")
    check(rc == 2 and "ftp://127.0.0.1:1" in err, "a bad URL is a usage error", out, err)


if __name__ == "__main__":
    sys.exit(suite.main(sys.argv, Cluster))
