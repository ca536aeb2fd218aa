#!/usr/bin/env python3
"""Black-box multi-node tests of the built `ddprun`: several agents on one machine, each
with its own loopback address (--local-addr 127.0.0.<n>), real PyTorch gloo workers.

    multinode_test.py <path to ddprun> <test name>     (ctest runs one test per process)
    multinode_test.py - --list                 (CMake registers the tests from it)

Workers run under PYTHON_EXEC=$DDPRUN_TEST_PYTHON; every test needs torch and exits 77
(ctest's SKIP_RETURN_CODE) when that interpreter lacks it. Waits are polls with generous
deadlines. Every agent runs in its own session and is killed (with its workers) at the end.
The harness (registry, check/poll, processes, ports, cleanup) is tests/support/blackbox.py,
shared with the integration suite.
"""
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
import blackbox  # noqa: E402
from blackbox import check, poll  # noqa: E402
import cluster  # noqa: E402
from cluster import (Cluster, left_out_then_started_again, stall_verdict_of,  # noqa: E402
                     straggler_left_out, venv_without_torch)
from cpu_limit import CpuLimit  # noqa: E402
from netns import Netns, netns_or_skip  # noqa: E402

suite = blackbox.Suite(__doc__, needs_torch=True)
test = suite.test
# Short intervals keep the elastic tests fast; a 5 s heartbeat threshold stays generous
# for agents starved by torch imports on a loaded 2-core ASan machine.
FAST = "keep_alive_interval=1,keep_alive_max_attempt=5,last_call_timeout=1.5,join_timeout=60"


def c10d_args(i, port, nnodes, run_id, extra=(), conf=FAST):
    return [f"--nnodes={nnodes}", "--nproc-per-node=1", f"--rdzv-id={run_id}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--local-addr=127.0.0.{i + 1}", f"--rdzv-conf={conf}", *extra]


@test(every_tier=True)
def c10d_four_nodes_node_rank(c):
    """The seed's node1.sh..node4.sh: c10d, 4 nodes x 1 proc, --node-rank honoured."""
    port = c.reserve_port()
    agents = [c.start(f"node{i}", c10d_args(i, port, 4, "bert_job_n1n3_01",
                                            [f"--node-rank={3 - i}"]))
              for i in range(4)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    for i, a in enumerate(agents):
        (r,) = a.records()
        check(r["allreduce_ok"], "all_reduce wrong", r)
        check(r["RANK"] == str(3 - i) and r["GROUP_RANK"] == str(3 - i),
              f"{a.name}: RANK/GROUP_RANK {r['RANK']}/{r['GROUP_RANK']} != node rank {3 - i}", r)
        check(r["WORLD_SIZE"] == "4" and r["GROUP_WORLD_SIZE"] == "4", "world sizes", r)
        check(r["MASTER_ADDR"] == "127.0.0.4", "MASTER_ADDR is group rank 0's --local-addr", r)
        check(r["TORCHELASTIC_RUN_ID"] == "bert_job_n1n3_01", "run id", r)


@test
def c10d_copied_node_rank_zero(c):
    """node1.sh copied to every node keeps --node_rank=0: torchrun's c10d ignores it, so
    the job runs (automatic order) and each agent warns once."""
    port = c.reserve_port()
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "copied_rank", ["--node_rank=0"]))
              for i in range(2)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    ranks = sorted(r["GROUP_RANK"] for a in agents for r in a.records())
    check(ranks == ["0", "1"], f"group ranks {ranks}", c.logs())
    for a in agents:
        check(a.text().count("--node-rank ignored: node rank 0 is claimed by both") == 1,
              f"{a.name}: one warning", a.text())


@test(needs_torch=False)
def c10d_store_host_past_the_soft_open_files_limit(c):
    """32 agents started under a soft open-files limit of 64 (a login shell's 1 024 is the
    same trap at ~500 agents): the store's host holds 2 connections per agent, so ddprun
    raises its own soft limit to the hard one and the round forms; every worker gets the
    64 it was started with back."""
    n = 32
    port = c.reserve_port()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    check(shutil.which("prlimit"), "prlimit (util-linux) is needed")
    agents = [c.start(f"node{i}", c10d_args(i, port, n, "nofile", ["--no-python"]),
                      ["-c", 'ulimit -Sn > "$MN_OUT/nofile.$RANK"'],
                      prefix=["prlimit", f"--nofile=64:{hard}", "--"], script="/bin/sh")
              for i in range(n)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    limits = [open(os.path.join(a.out, f)).read().strip() for a in agents
              for f in os.listdir(a.out) if f.startswith("nofile.")]
    check(len(limits) == n, f"{len(limits)} of {n} workers ran", c.logs())
    check(set(limits) == {"64"}, f"workers' soft open-files limits: {sorted(set(limits))}")


@test(needs_torch=False)
def c10d_256_agents_four_per_address(c):
    """Issue 35: 256 agents, four per --local-addr (one launcher per GPU, each
    --nproc-per-node 1), the c10d store hosted by one of them, on this machine however
    busy: one round, every worker runs once, every agent exits 0 (bench/rdzv_procs.py
    times 1024). Run alone (RUN_SERIAL): 35-80 s with the ASan build on 2 cores where
    processes start fast, 190 s where they do not (docs/architecture.md, CI), about half
    that without the globals' redzones; scripts/test runs it on the Release build (17 s
    and 29 CPU-s against 101 s and 180 with ASan agents, 2026-11-30)."""
    n = 256
    # ASan's quarantine and leak check at exit cost each agent memory and CPU; 256 of them
    # must fit beside the other tests. report_globals=0: no redzones around the binary's
    # globals, whose poisoning at start and exit (a memset of their shadow, page by page)
    # was half of each agent's CPU time; the C++ suites keep them (the other black-box
    # tests run without them too: ddprun_tier_test in tests/CMakeLists.txt).
    light = ("quarantine_size_mb=1:malloc_context_size=2:detect_leaks=0:abort_on_error=1:"
             "report_globals=0")
    c10d_256_agents_run(c, n, light)


def c10d_256_agents_run(c, n, light):
    port = c.reserve_port()
    old = os.environ.get("ASAN_OPTIONS")
    os.environ["ASAN_OPTIONS"] = light
    try:
        agents = [c.start(f"node{i}", [
            f"--nnodes={n}", "--nproc-per-node=1", "--rdzv-id=many", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}", f"--local-addr=127.0.0.{i // 4 + 1}",
            "--no-python"], ["-c", 'touch "$MN_OUT/w.$RANK"'], script="/bin/sh")
            for i in range(n)]
    finally:
        if old is None:
            del os.environ["ASAN_OPTIONS"]
        else:
            os.environ["ASAN_OPTIONS"] = old
    deadline = time.monotonic() + 280
    failed = [a.name for a in agents if a.wait(max(1, deadline - time.monotonic())) != 0]
    check(not failed, f"{len(failed)} agents failed: {failed[:8]}",
          "\n".join(f"=== {a.name}\n{a.text()}" for a in agents if a.name in failed[:4]))
    ranks = sorted(int(f[2:]) for a in agents for f in os.listdir(a.out) if f.startswith("w."))
    check(ranks == list(range(n)), f"workers ran: {len(ranks)} of {n}, ranks {ranks[:8]}...")
    restarts = [a.name for a in agents if "starting round" in a.text()]
    check(not restarts, f"agents that started another round: {restarts[:8]}", c.logs())


# One tier (1.13): what differs by tier, the workers' torch, ddp_four_workers and
# c10d_four_nodes_node_rank run on every tier; the rest is the agents' own logic.
@test
def static_two_nodes_two_procs(c):
    port = c.reserve_port()
    agents = []
    for i in range(2):
        agents.append(c.start(f"node{i}", [
            "--nnodes=2", "--nproc-per-node=2", f"--node-rank={i}", "--master-addr=127.0.0.1",
            f"--master-port={port}", f"--local-addr=127.0.0.{i + 1}"]))
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    for i, a in enumerate(agents):
        recs = a.records()
        check(len(recs) == 2, f"{a.name}: {len(recs)} records", c.logs())
        ranks = sorted(int(r["RANK"]) for r in recs)
        check(ranks == [2 * i, 2 * i + 1], f"{a.name}: ranks {ranks}", recs)
        for r in recs:
            check(r["WORLD_SIZE"] == "4" and r["GROUP_RANK"] == str(i) and r["allreduce_ok"],
                  "layout", r)
            check(r["MASTER_ADDR"] == "127.0.0.1", "MASTER_ADDR is node rank 0's address", r)


@test
def static_one_port_and_a_restart(c):
    """Workers use the store at --master-port (torchrun's one open port), and a restart
    in that shared store neither loses the rendezvous nor shows attempt 0's keys."""
    port = c.reserve_port()
    agents = [c.start(f"node{i}", [
        "--nnodes=2", "--nproc-per-node=1", f"--node-rank={i}", "--master-addr=127.0.0.1",
        f"--master-port={port}", f"--local-addr=127.0.0.{i + 1}", "--max-restarts=1",
        f"--rdzv-conf={FAST}"], ["--fail-rank=1", "--fail-once"]) for i in range(2)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    for a in agents:
        recs = a.records()
        attempts = sorted(r["TORCHELASTIC_RESTART_COUNT"] for r in recs)
        check(len(attempts) == 2 and attempts[0] != attempts[1], f"{a.name}: attempts", recs)
        for r in recs:
            check(r["MASTER_PORT"] == str(port), f"MASTER_PORT {r['MASTER_PORT']} != {port}", r)
            check(r["allreduce_ok"] and r["WORLD_SIZE"] == "2", "layout", r)


# One tier (1.13): what differs by tier, the workers' torch, ddp_four_workers and
# c10d_four_nodes_node_rank run on every tier; the rest is the agents' own logic.
@test
def elastic_three_nodes_of_2_to_4(c):
    port = c.reserve_port()
    agents = [c.start(f"node{i}", c10d_args(i, port, "2:4", "elastic3")) for i in range(3)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    ranks = sorted(int(a.records()[0]["RANK"]) for a in agents)
    check(ranks == [0, 1, 2], f"ranks {ranks}", c.logs())
    for a in agents:
        check(a.records()[0]["WORLD_SIZE"] == "3", "WORLD_SIZE 3", a.records())


@test
def late_node_joins_running_job(c):
    """2:3 with two nodes running; a third arrives; all restart into a world of 3 without
    spending --max-restarts (it is 0): TORCHELASTIC_RESTART_COUNT stays 0, as torchrun's
    (it counts restarts, not rendezvous rounds)."""
    port = c.reserve_port()
    wargs = ["--until-world", "3"]
    agents = [c.start(f"node{i}", c10d_args(i, port, "2:3", "late", ["--max-restarts=0"]), wargs)
              for i in range(2)]
    poll(lambda: all(a.records() for a in agents), 90, "two nodes running", c.logs)
    check(all(a.records()[0]["WORLD_SIZE"] == "2" for a in agents), "first world is 2", c.logs())
    agents.append(c.start("node2", c10d_args(2, port, "2:3", "late", ["--max-restarts=0"]),
                          wargs))
    for a in agents:
        check(a.wait(150) == 0, f"{a.name} failed", c.logs())
    finals = [r for a in agents for r in a.records() if r["WORLD_SIZE"] == "3"]
    check(sorted(int(r["RANK"]) for r in finals) == [0, 1, 2], "ranks of the world of 3",
          c.logs())
    counts = {r["TORCHELASTIC_RESTART_COUNT"] for a in agents for r in a.records()}
    check(counts == {"0"}, f"a membership change spends no restart: counts {counts}", c.logs())


@test
def c10d_restart_counts_once_on_every_node(c):
    """A worker fails once on one node (c10d, --max-restarts=1): that node spends a
    restart, the other only follows it into the new round, and both tell their workers
    TORCHELASTIC_RESTART_COUNT=1 (PyTorch 1.13 workers put it into their store keys)."""
    port = c.reserve_port()
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "once", ["--max-restarts=1",
                                                               f"--node-rank={i}"]),
                      ["--fail-rank=1", "--fail-once", "--steps=20"]) for i in range(2)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    for a in agents:
        last = max(a.records(), key=lambda r: r["t"])
        check(last["TORCHELASTIC_RESTART_COUNT"] == "1" and last["allreduce_ok"],
              f"{a.name}: the second attempt is restart 1", a.records())


# One tier (1.13): what differs by tier, the workers' torch, ddp_four_workers and
# c10d_four_nodes_node_rank run on every tier; the rest is the agents' own logic.
@test
def node_killed_mid_run(c):
    """2:3 with three nodes; one agent is SIGKILLed; the survivors re-rendezvous into a
    world of 2 and finish."""
    port = c.reserve_port()
    wargs = ["--until-world", "2"]
    agents = [c.start(f"node{i}", c10d_args(i, port, "2:3", "kill", ["--max-restarts=3"]), wargs)
              for i in range(3)]
    poll(lambda: all(a.records() for a in agents), 90, "three nodes running", c.logs)
    agents[2].kill()
    for a in agents[:2]:
        check(a.wait(150) == 0, f"{a.name} failed", c.logs())
    for a in agents[:2]:
        check(any(r["WORLD_SIZE"] == "2" for r in a.records()),
              "survivors finish in a world of 2", c.logs())


@test
def endpoint_host_killed(c):
    """The agent hosting the rendezvous store dies: the other exits non-zero naming the
    endpoint, well within its timeouts."""
    port = c.reserve_port()
    conf = FAST + ",read_timeout=10"
    wargs = ["--until-world", "99"]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "hostdies", ["--max-restarts=1"], conf),
                      wargs) for i in range(2)]
    poll(lambda: all(a.records() for a in agents), 90, "two nodes running", c.logs)
    agents[0].kill()  # 127.0.0.1 = the endpoint host
    rc = agents[1].wait(90)
    check(rc != 0, "the survivor must fail", c.logs())
    check(f"127.0.0.1:{port}" in agents[1].text(), "the error names the endpoint", c.logs())


@test
def store_host_stopped(c):
    """The agent that hosts the rendezvous store (and the workers' store) is SIGSTOPped for
    longer than the heartbeat threshold, then SIGCONTed. Nobody left: no node may be
    declared dead, and the job finishes in its first round."""
    port = c.reserve_port()
    # Dead after 6 s without a beat; beats every 3 s, looks every 1 s, so an agent's call
    # that hangs on the frozen store is more often a look than a beat.
    conf = "keep_alive_interval=3,keep_alive_max_attempt=2,last_call_timeout=1.5,join_timeout=60"
    wargs = ["--steps", "300", "--step-sleep", "0.1"]  # 30 s and more of all_reduce steps
    agents = [c.start(f"node{i}", c10d_args(i, port, 3, "stopped", ["--max-restarts=0"], conf),
                      wargs) for i in range(3)]
    poll(lambda: all(a.records() for a in agents), 90, "three nodes running", c.logs)
    os.kill(agents[0].proc.pid, signal.SIGSTOP)  # the agent only: its workers run on
    try:
        # The stimulus itself, not a wait for an event: the agent stays frozen for two
        # heartbeat thresholds (nothing it does can be observed while it is stopped).
        time.sleep(12)
    finally:
        os.kill(agents[0].proc.pid, signal.SIGCONT)
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    for a in agents:
        check(len(a.records()) == 1, f"{a.name}: one attempt, no new round", c.logs())
        check("missed its heartbeats" not in a.text(), f"{a.name} blamed a node", c.logs())


@test
def other_job_same_rdzv_id(c):
    """A second job's node with the same --rdzv-id and endpoint but another program is
    refused with one line naming both programs; the running job goes on undisturbed."""
    port = c.reserve_port()
    wargs = ["--steps", "60", "--step-sleep", "0.1"]
    agents = [c.start(f"node{i}", c10d_args(i, port, "2:3", "shared_id", ["--max-restarts=0"]),
                      wargs) for i in range(2)]
    poll(lambda: all(a.records() for a in agents), 90, "two nodes running", c.logs)
    other_script = os.path.join(c.dir, "other_worker.py")
    shutil.copyfile(cluster.WORKER, other_script)
    other = c.start("other", c10d_args(2, port, "2:3", "shared_id"), ["--steps", "7"],
                    script=other_script)
    check(other.wait(60) == 1, "the other job's node exits 1", c.logs())
    errors = [l for l in other.text().splitlines() if "belongs to another job" in l]
    check(len(errors) == 1 and "'shared_id'" in errors[0] and "mn_worker.py`" in errors[0]
          and "other_worker.py`" in errors[0],
          "one line naming the run id and both programs", other.text())
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
        check(len(a.records()) == 1, f"{a.name}: one attempt, undisturbed", c.logs())


@test
def per_node_script_arguments(c):
    """Nodes of one job may pass different arguments to the same script (a per-node output
    directory, `--output_dir=$(hostname)`): the job is identified by its entry point, not
    by the arguments, so both nodes join and finish (issue 21 item 3)."""
    port = c.reserve_port()
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "per_node_args"), [f"--tag=node{i}"])
              for i in range(2)]
    for a in agents:
        check(a.wait(90) == 0, f"{a.name} failed", c.logs())
    for i, a in enumerate(agents):
        (r,) = a.records()
        check(r["allreduce_ok"] and r["WORLD_SIZE"] == "2", "one world of two nodes", r)
        check(r["tag"] == f"node{i}", f"{a.name} ran with its own arguments", r)
        check("another job" not in a.text(), f"{a.name} refused", c.logs())


@test
def failed_node_ends_the_job(c):
    """A worker fails for good on one node (no restarts): every agent exits non-zero,
    promptly, and the job's rendezvous is closed (no silent hang on the other node)."""
    port = c.reserve_port()
    wargs = ["--fail-rank", "1", "--until-world", "99"]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "fails", ["--node-rank=%d" % i]), wargs)
              for i in range(2)]
    t0 = time.monotonic()
    for a in agents:
        check(a.wait(90) != 0, f"{a.name} must fail", c.logs())
    check(time.monotonic() - t0 < 60, "well before any timeout", c.logs())
    check("exitcode" in agents[1].text(), "the failing node reports its worker", c.logs())


@test
def host_node_failure_named_on_the_other_node(c):
    """The node hosting the rendezvous store spends its restarts and ends the job: the
    other node says the job ended on that node, not "lost the rendezvous store ... Broken
    pipe" (issue 31 item 20)."""
    port = c.reserve_port()
    wargs = ["--fail-rank", "0", "--until-world", "99"]
    # Node 1 has restarts left when node 0 has spent its own: its next rendezvous fails.
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "host_fails",
                                            ["--node-rank=%d" % i, f"--max-restarts={1 + 2 * i}"]),
                      wargs) for i in range(2)]
    for a in agents:
        check(a.wait(90) != 0, f"{a.name} must fail", c.logs())
    check("exitcode" in agents[0].text(), "the host node reports its worker", c.logs())
    errors = [l for l in agents[1].text().splitlines() if "rendezvous failed" in l]
    check(errors and all("Broken pipe" not in l and "lost the rendezvous store" not in l
                         for l in errors), "no socket errno for a job that ended", c.logs())
    check(any("the job ended on the node hosting the rendezvous store" in l
              or "is closed: the job has ended" in l for l in errors),
          "node 1 says the job ended", c.logs())


@test
def waiting_feedback_then_timeout(c):
    port = c.reserve_port()
    conf = "keep_alive_interval=0.5,join_timeout=4"
    a = c.start("node0", c10d_args(0, port, 2, "lonely", conf=conf))
    rc = a.wait(60)
    text = a.text()
    check(rc != 0, "a lone node must fail after join_timeout", text)
    check("rendezvous 'lonely' (c10d at 127.0.0.1:" in text, "progress names run id, endpoint",
          text)
    check("1 joined (min 2, max 2)" in text, "progress says joined/min/max", text)
    check("s left" in text and "timed out" in text, "time left, then the timeout", text)


def _signal_during_rendezvous(c, sig, host):
    """A node waiting for its peer (as the store host, or still connecting to an endpoint
    nobody serves) gets `sig`: it must end promptly with a failure code."""
    port = c.reserve_port()
    a = c.start("node0", c10d_args(0 if host else 1, port, 2, "sig"))
    if host:
        poll(lambda: _listening(port), 30, "the rendezvous store listening", c.logs)
    poll(lambda: "waiting for" in a.text(), 30, "the waiting line", c.logs)
    t0 = time.monotonic()
    os.kill(a.proc.pid, sig)
    rc = a.wait(10)
    check(rc != 0, f"signal {sig} ends the agent with a failure code", a.text())
    check(time.monotonic() - t0 < 5, "promptly", a.text())


@test
def sigint_during_rendezvous(c):
    _signal_during_rendezvous(c, signal.SIGINT, host=True)


@test
def sigterm_while_connecting(c):
    _signal_during_rendezvous(c, signal.SIGTERM, host=False)


# --- network namespaces (tests/support/netns.py) ---------------------------------------

def netns_args(i, nnodes, run_id, conf, endpoint=f"{Netns.addr(0)}:29400"):
    # No --local-addr: the agents find their own address (the route towards the endpoint)
    # and the host recognises the endpoint as one of its interface addresses.
    return [f"--nnodes={nnodes}", "--nproc-per-node=1", f"--rdzv-id={run_id}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-conf={conf}"]


@test
def netns_three_nodes(c):
    """Three network stacks: no --local-addr; endpoint host found by interface address."""
    net = netns_or_skip(3)
    try:
        agents = [c.start(f"node{i}", netns_args(i, 3, "netns3", FAST), prefix=net.prefix(i))
                  for i in range(3)]
        for a in agents:
            check(a.wait(120) == 0, f"{a.name} failed", c.logs())
        by_rank = {}
        for i, a in enumerate(agents):
            (r,) = a.records()
            by_rank[int(r["RANK"])] = i
            check(r["WORLD_SIZE"] == "3" and r["allreduce_ok"], "layout", r)
            check(r["MASTER_ADDR"] == Netns.addr(0), "MASTER_ADDR: group rank 0's address", r)
        check(sorted(by_rank) == [0, 1, 2], f"ranks {sorted(by_rank)}", c.logs())
        # Deterministic order without --node-rank: by address.
        check(by_rank == {0: 0, 1: 1, 2: 2}, f"ranks follow addresses: {by_rank}", c.logs())
    finally:
        c.close()
        net.close()


@test
def netns_link_cut(c):
    """2:3 with three nodes; node 2's link is cut (no RST, packets vanish). The survivors
    notice the missing heartbeats, re-rendezvous and finish in a world of 2; the cut node
    exits non-zero once its store calls time out."""
    net = netns_or_skip(3)
    conf = FAST + ",read_timeout=6"
    try:
        wargs = ["--until-world", "2"]
        agents = [c.start(f"node{i}", netns_args(i, "2:3", "cut", conf), wargs,
                          prefix=net.prefix(i)) for i in range(3)]
        poll(lambda: all(a.records() for a in agents), 90, "three nodes running", c.logs)
        net.cut(2)
        for a in agents[:2]:
            check(a.wait(150) == 0, f"{a.name} failed", c.logs())
        for a in agents[:2]:
            check(any(r["WORLD_SIZE"] == "2" for r in a.records()),
                  "survivors finish in a world of 2", c.logs())
        check(agents[2].wait(120) != 0, "the cut node fails", c.logs())
        check(f"{Netns.addr(0)}:29400" in agents[2].text(), "naming the endpoint", c.logs())
    finally:
        c.close()
        net.close()


@test
def netns_hostnames_resolve_nowhere(c):
    """Three hosts whose own host names resolve nowhere (no hosts entry, no DNS), the
    endpoint given as node 1's address, no --local-addr: the job runs, every node
    publishes its route's source address, and the endpoint's node is group rank 0 although
    node 0 has the smaller address (the others follow by address)."""
    names = [f"nodns{i}" for i in range(3)]
    net = netns_or_skip(3, hostnames=names)
    try:
        for i in range(3):
            probe = subprocess.run([*net.prefix(i), "sh", "-c", '! getent hosts "$(hostname)"'],
                                   capture_output=True, text=True)
            check(probe.returncode == 0, f"premise: {names[i]} resolves nowhere", probe)
        endpoint = f"{Netns.addr(1)}:29400"
        # No GLOO_SOCKET_IFNAME either: ddprun gives it (gloo would bind to loopback).
        agents = [c.start(f"node{i}", netns_args(i, 3, "nodns", FAST, endpoint),
                          prefix=net.prefix(i), gloo_ifname=False) for i in range(3)]
        for a in agents:
            check(a.wait(120) == 0, f"{a.name} failed", c.logs())
        for i, want in enumerate([1, 0, 2]):
            (r,) = agents[i].records()
            check(r["allreduce_ok"] and r["WORLD_SIZE"] == "3", "layout", r)
            check(r["GROUP_RANK"] == str(want) and r["RANK"] == str(want),
                  f"node{i}: group rank {r['GROUP_RANK']}, expected {want} (endpoint host "
                  "first, then by address)", c.logs())
            check(r["MASTER_ADDR"] == Netns.addr(1), "MASTER_ADDR: the endpoint host's", r)
            check("the workers get GLOO_SOCKET_IFNAME=mn0" in agents[i].text(),
                  f"node{i} says it chose gloo's interface", agents[i].text())
    finally:
        c.close()
        net.close()


def debian_hosts(net, names):
    """Debian's /etc/hosts on every node: `127.0.1.1 <own name>`, the peers by address."""
    for i, own in enumerate(names):
        peers = "".join(f"{Netns.addr(j)} {n}\n" for j, n in enumerate(names) if j != i)
        net.set_hosts(i, f"127.0.0.1 localhost\n127.0.1.1 {own}\n{peers}")


@test
def netns_debian_hosts_file(c):
    """Debian's default hosts entry (`127.0.1.1 <own name>`) on every node, the endpoint
    given by node 1's name, which is loopback on node 1 itself, no GLOO_SOCKET_IFNAME: the
    job runs with a MASTER_ADDR the remote workers reach and node 1 as group rank 0. Then node 1 given a
    loopback --local-addr: refused with one line naming --local-addr before any worker
    starts, never remote workers dialing their own loopback."""
    names = [f"deb{i}" for i in range(3)]
    net = netns_or_skip(3, hostnames=names)
    try:
        debian_hosts(net, names)
        agents = [c.start(f"node{i}", netns_args(i, 3, "debian", FAST, "deb1:29400"),
                          prefix=net.prefix(i), gloo_ifname=False) for i in range(3)]
        for a in agents:
            check(a.wait(120) == 0, f"{a.name} failed", c.logs())
        for i in range(3):
            (r,) = agents[i].records()
            check(r["allreduce_ok"] and r["WORLD_SIZE"] == "3", "layout", r)
            check(r["MASTER_ADDR"] == "deb1", "MASTER_ADDR: node 1 by the name its peers dial",
                  r)
            if i == 1:
                check(r["GROUP_RANK"] == "0", "the endpoint's node is group rank 0", c.logs())
        refused = [c.start(f"refused{i}", netns_args(i, 3, "debian_lo", FAST, "deb1:29401") +
                           (["--local-addr=127.0.1.1"] if i == 1 else []), prefix=net.prefix(i))
                   for i in range(3)]
        for a in refused:
            check(a.wait(90) != 0, f"{a.name} must fail", c.logs())
            check(not a.records(), f"{a.name}: no worker may start", c.logs())
        # Every node refuses from the same descriptors (test_rendezvous "[address]"); the
        # store's host waits for the others, so they normally print the line too.
        line = "would give the workers the loopback address 127.0.1.1 as MASTER_ADDR"
        check(line in refused[1].text() and "start ddprun on deb1 with --local-addr" in
              refused[1].text(), "the store host names the fix", c.logs())
    finally:
        c.close()
        net.close()


JOB_WORKER = os.path.join(HERE, "workers", "job_worker.py")


def _marked_line(path, mark):
    with open(path) as f:
        return next(i for i, l in enumerate(f, 1) if mark in l)


def ddprun_status(c, *args, timeout=20):
    """`ddprun status ARGS`: (exit code, stdout, stderr, seconds it took)."""
    t0 = time.monotonic()
    p = subprocess.run([c.ddprun, "status", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


@test
def stall_waiting_node_is_not_a_stall(c):
    """Issue 32: --stall-timeout 3 on 2 nodes; rank 0 (node 0 or 1) computes silently for
    10 s while rank 1 waits in a barrier. The waiting node's workers are all idle, but ranks
    elsewhere progress: not a stall. The job succeeds and the waiting node says why."""
    port = c.reserve_port()
    extra = ["--stall-timeout=3", "--max-restarts=0"]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "stall_eval", extra),
                      ["evaluate", "10"], script=JOB_WORKER) for i in range(2)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed: a waiting node was judged stalled", c.logs())
    check(any("this node waits for them, which is not a stall" in a.text() for a in agents),
          "the waiting node says it waits", c.logs())
    check(all("stall (job-wide)" not in a.text() for a in agents), "no verdict", c.logs())


def _flight_recorder_dumps(log_dir):
    """The flight recorder dump files ddprun left under `log_dir` (one run, attempt 0)."""
    found = []
    for run in os.listdir(log_dir):
        folder = os.path.join(log_dir, run, "attempt_0", "flight_recorder")
        if os.path.isdir(folder):
            found += [os.path.join(folder, f) for f in os.listdir(folder)]
    return sorted(found)


def _analyze_dumps(c, dumps):
    """PyTorch's analyzer (the tier's interpreter) on every node's dump files (`dumps`: a
    list per node), put in one folder: what it printed."""
    both = os.path.join(c.dir, "flight_recorder")
    os.mkdir(both)
    for d in dumps:
        for f in d:
            shutil.copy(f, both)
    run = subprocess.run([blackbox.PYTHON, "-m", "torch.distributed.flight_recorder.fr_trace",
                          both, "--prefix", "nccl_trace_rank_"], capture_output=True, text=True,
                         timeout=120)
    check(run.returncode == 0, "the analyzer read the dumps", run.stdout + run.stderr)
    return run.stdout + run.stderr


@test(tiers=("113", "214"))
def stall_verdict_names_the_culprit_on_every_node(c):
    """Issue 32: --stall-timeout 3 on 2 nodes; rank 1 sleeps before its all_reduce while
    rank 0 waits in it. Every node prints the same job-wide verdict: rank 1, its host and
    pid, at the sleep's file:line, first; rank 0 waiting at the all_reduce's line. With
    PyTorch 2.14's flight recorder (which ddprun switches on) the verdict also names the
    collective: rank 1 never entered all_reduce #N of group 0, rank 0 waits in it; and
    each rank's recorder is dumped into its node's log dir
    (attempt_0/flight_recorder/nccl_trace_rank_<rank>) before the workers are stopped, one
    line per node saying where and the analyzer's command, which, run by PyTorch 2.14 on
    both nodes' files, says rank 1 never joined the all_reduce; the run record names the
    folder. Older PyTorch: no dump folder, and each node that stopped its ranks says why
    in one line, without asking them (their hooks said so). Each node's failure report
    carries the verdict's headline."""
    recorder = tuple(map(int, blackbox.torch_version().split(".")[:2])) >= (2, 14)
    port = c.reserve_port()
    extra = ["--stall-timeout=3", "--max-restarts=0"]
    recs = [os.path.join(c.dir, f"rec{i}.json") for i in range(2)]
    logs = [os.path.join(c.dir, f"logs{i}") for i in range(2)]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "stall_hang",
                                            [*extra, f"--record-file={recs[i]}",
                                             f"--log-dir={logs[i]}"]), ["hang"],
                      script=JOB_WORKER) for i in range(2)]
    for a in agents:
        check(a.wait(120) != 0, f"{a.name} must fail", c.logs())
    sleep = f"job_worker.py:{_marked_line(JOB_WORKER, '# STALL-SLEEP')} in step"
    allreduce = f"job_worker.py:{_marked_line(JOB_WORKER, '# STALL-ALLREDUCE')} in step"
    heads = []
    for a in agents:
        lines = [l for l in a.text().splitlines() if "stall (job-wide): " in l]
        check(lines, f"{a.name}: no verdict", c.logs())
        head = lines[0][lines[0].index("stall (job-wide): "):]
        heads.append(head)
        parts = head.split("; ")
        check(len(parts) == 3 and parts[1].startswith("rank 1 on ")
              and parts[2].startswith("rank 0 on "), "the culprit first", head)
        check(parts[1].endswith(sleep) and "(127.0.0." in parts[1], "rank 1's place and host",
              head)
        if recorder:
            seq = parts[1].partition(" never entered all_reduce #")[2].partition(" ")[0]
            check(seq.isdigit() and f" #{seq} of group 0: it is at " in parts[1],
                  "rank 1 never entered the all_reduce (flight recorder)", head)
            check(f" waits in all_reduce #{seq} of group 0 at " in parts[2]
                  and f"{allreduce} (inside " in parts[2],
                  "rank 0 waits in that all_reduce (flight recorder)", head)
        else:
            check(" is at " in parts[1], "rank 1 is at the sleep", head)
            check(" waits at " in parts[2] and f"{allreduce} (inside " in parts[2],
                  "rank 0 waits in all_reduce", head)
        check(any("stalled: no progress" in l and "stall (job-wide): " in l
                  for l in a.text().splitlines()), f"{a.name}: the report's note", c.logs())
        check("root cause (job-wide): the job stalled: no rank of the job made progress"
              in a.text(), f"{a.name}: the root cause is the stall", c.logs())
    check(heads[0] == heads[1], "the same verdict on every node", c.logs())
    for rec in recs:
        with open(rec) as f:
            r = json.load(f)
        check(r["stall_verdict"] and r["stall_verdict"][0] == heads[0]
              and r["exit_class"] == "stall", "the record carries the verdict", r)
    dumps = [_flight_recorder_dumps(d) for d in logs]
    folders = []
    for rec in recs:
        with open(rec) as f:
            folders.append(json.load(f)["attempts"][0]["flight_recorder"])
    if not recorder:
        check(dumps == [[], []] and folders == [None, None], "no dump without a flight recorder",
              dumps, folders)
        # Said by every node whose watchdog stopped its ranks, once, from what each rank's
        # hook said when its process group formed: a rank ended by a peer's abort before
        # its own watchdog fired (no node holds its SIGABRT without dumps) is never asked.
        for a in agents:
            text = a.text()
            said = [l for l in text.splitlines() if "stall: no flight recorder dumps" in l]
            fired = "dumping their Python stacks (SIGABRT)" in text
            check(len(said) == (1 if fired else 0)
                  and all(" wrote none: PyTorch " in l
                          and " has no flight recorder for its process groups" in l
                          for l in said),
                  f"{a.name}: a line says why there is no dump", c.logs())
        check(any("dumping their Python stacks (SIGABRT)" in a.text() for a in agents),
              "a node stopped its ranks", c.logs())
        return
    # Each node dumped its own rank, in PyTorch's naming, and said where and how to read it.
    names = [[os.path.basename(f) for f in d] for d in dumps]
    check(sorted(n for d in names for n in d) == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
          and all(len(d) == 1 for d in names), "one dump per rank, in its node's log dir", dumps)
    check(folders == [os.path.dirname(d[0]) for d in dumps], "each run record names its folder",
          folders)
    for a, d in zip(agents, dumps):
        folder = os.path.dirname(d[0])
        line = next((l for l in a.text().splitlines() if "stall: flight recorder dumps of" in l),
                    "")
        check(f" are in {folder}; analyze them with: " in line
              and line.endswith(f" -m torch.distributed.flight_recorder.fr_trace {folder} "
                                "--prefix nccl_trace_rank_ (this node's ranks: copy every "
                                "node's files into one folder first, or add "
                                "--allow-incomplete-ranks)"),
              f"{a.name}: the line names the folder and the analyzer's command", line)
    # PyTorch 2.14's own analyzer reads both nodes' files and finds rank 1 missing.
    said = _analyze_dumps(c, dumps)
    check("Not all ranks joining collective" in said and "collective: gloo:all_reduce" in said
          and "missing ranks: {1}" in said,
          "the analyzer names rank 1 as missing from the all_reduce", said)


@test
def stall_verdict_without_torch_or_python(c):
    """Issue 32's bad input, end to end: --stall-timeout 3 on two jobs of 2 nodes at once,
    whose workers never import torch: one a Python script sleeping at a known line, one not
    Python at all (--no-python /bin/sh). Every node of each job prints the same verdict
    (the script's line; "without a Python stack" for the shell), the report's root cause is
    the stall, and no node hangs or crashes."""
    script = os.path.join(c.dir, "no_torch.py")
    with open(script, "w") as f:
        f.write("import time\n\ntime.sleep(120)  # NO-TORCH-SLEEP\n")
    ports = [c.reserve_port(), c.reserve_port()]
    extra = ["--stall-timeout=3", "--max-restarts=0"]
    py = [c.start(f"py{i}", c10d_args(i, ports[0], 2, "no_torch", extra), [], script=script)
          for i in range(2)]
    sh = [c.start(f"sh{i}", c10d_args(i, ports[1], 2, "no_python", [*extra, "--no-python"]),
                  ["-c", "sleep 120"], script="/bin/sh") for i in range(2)]
    for job, want in ((py, f"all 2 ranks are at {script}:3 in <module>"),
                      (sh, "all 2 ranks are without a Python stack (not sampled)")):
        head = stall_verdict_of(c, job, rc=1)
        check(want in head, "the verdict says where the ranks are", head)
        for a in job:
            check("root cause (job-wide): the job stalled" in a.text(),
                  f"{a.name}: the root cause is the stall", c.logs())


@test(tier="214")
def stall_verdict_names_a_mismatched_collective(c):
    """Issue 32, PyTorch 2.14's flight recorder: 2 nodes, --stall-timeout 3; rank 1 calls
    broadcast where rank 0 calls all_reduce (both hang in gloo). Every node's verdict says
    the ranks entered different collectives as the same one of group 0, naming each; and
    PyTorch 2.14's analyzer, on both nodes' dumps, names rank 1 the culprit of a collective
    type mismatch."""
    port = c.reserve_port()
    extra = ["--stall-timeout=3", "--max-restarts=0"]
    logs = [os.path.join(c.dir, f"logs{i}") for i in range(2)]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "stall_mismatch",
                                            [*extra, f"--log-dir={logs[i]}"]), ["mismatch"],
                      script=JOB_WORKER) for i in range(2)]
    for a in agents:
        check(a.wait(120) != 0, f"{a.name} must fail", c.logs())
    for a in agents:
        head = next((l for l in a.text().splitlines() if "stall (job-wide): " in l), "")
        check("; ranks entered different collectives as #2 of group 0: all_reduce (rank 0), "
              "broadcast (rank 1): a collective called on some ranks and not on others" in head,
              f"{a.name}: the mismatch named", c.logs())
        check(" waits in broadcast #2 of group 0 at " in head
              and f"job_worker.py:{_marked_line(JOB_WORKER, '# MISMATCH-BROADCAST')}" in head,
              f"{a.name}: rank 1's place", head)
    said = _analyze_dumps(c, [_flight_recorder_dumps(d) for d in logs])
    check("Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH" in said
          and "'all_reduce' does not match found collective type: 'broadcast'" in said,
          "the analyzer names rank 1's broadcast", said)


@test(tier="214")
def stall_verdict_without_the_recorder_the_user_switched_off(c):
    """Issue 32, bad input: the user's TORCH_FR_BUFFER_SIZE=0 (PyTorch 2.14's flight
    recorder off) on 2 nodes, --stall-timeout 3, rank 1 sleeping before its all_reduce.
    The job-wide verdict still comes (the functions, not the collective), no dump is
    asked for or written, and each node says why in one line; the job's outcome (a stall,
    exit 1) is unchanged."""
    port = c.reserve_port()
    logs = [os.path.join(c.dir, f"logs{i}") for i in range(2)]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "stall_fr_off",
                                            ["--stall-timeout=3", "--max-restarts=0",
                                             f"--log-dir={logs[i]}"]), ["hang"],
                      script=JOB_WORKER, env={"TORCH_FR_BUFFER_SIZE": "0"}) for i in range(2)]
    for a in agents:
        check(a.wait(120) == 1, f"{a.name} must fail as a stall does (exit 1)", c.logs())
    for a in agents:
        head = next((l for l in a.text().splitlines() if "stall (job-wide): " in l), "")
        check("; rank 1 on " in head and " is at " in head and " never entered " not in head,
              f"{a.name}: the verdict, without the recorder's collective", c.logs())
        lines = [l for l in a.text().splitlines() if "flight recorder" in l]
        check(len(lines) == 1 and lines[0].endswith(
            "stall: no flight recorder dumps: the workers' environment switches PyTorch's "
            "flight recorder off (TORCH_FR_BUFFER_SIZE=0)"), f"{a.name}: one line says why",
            c.logs())
    check([_flight_recorder_dumps(d) for d in logs] == [[], []], "no dump folder",
          os.listdir(c.dir))


@test(tier="214")
def straggler_named_by_node_0_and_its_own_node(c):
    """Issue 34: 2 nodes x 2 ranks, PyTorch 2.14's flight recorder (on with
    --stall-timeout), --straggler-window 5; for 20 s the last rank (3, on node 1) sleeps
    0.3 s before each all_reduce, the others 0.02 s. Node 0 (which ranks the job) and node 1
    (the straggler's) log a line naming rank 3, its host and a median margin near 0.28 s,
    once; the run record carries it, and `ddprun status` shows it while the job runs (issue
    34's ranking in the live view); the job succeeds."""
    port = c.reserve_port()
    recs = [os.path.join(c.dir, f"rec{i}.json") for i in range(2)]
    extra = ["--nproc-per-node=2", "--stall-timeout=60", "--straggler-window=5"]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "straggle",
                                            [*extra, f"--record-file={recs[i]}"]),
                      ["straggle", "20"], script=JOB_WORKER) for i in range(2)]

    def in_status():  # `ddprun status` shows the line while the job runs
        time.sleep(0.5)  # a value every 2 s: no need to start an ASan ddprun every 50 ms
        rc, out, _, _ = ddprun_status(c, "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                                      "--rdzv-id=straggle", "--json")
        return rc == 0 and [n["straggler"] for n in json.loads(out)["nodes"] if "straggler" in n]

    shown = poll(in_status, 60, "ddprun status shows the straggler line", c.logs)
    check(all(l.startswith("straggler: rank 3 on localhost (127.0.0.2) arrived last at ")
              for l in shown), "the line in the status", shown)
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    lines = []
    for a, rec in zip(agents, recs):
        mine = [l[l.index("straggler: "):] for l in a.text().splitlines()
                if "warning: straggler: " in l]
        # Said once while rank 3 stays the straggler; again only after a window that
        # named none (a busy machine can leave a window with too few collectives).
        check(mine and all(l.startswith("straggler: rank 3 on localhost (127.0.0.2) arrived "
                                        "last at ") for l in mine),
              f"{a.name}: the straggler line", c.logs())
        lines.append(mine[0])
        with open(rec) as f:
            check(json.load(f)["stragglers"] == mine, f"{a.name}: the record's stragglers",
                  c.logs())
    # Node 1 says node 0's finding when it reads it: a window later, its counts may differ.
    check(len({l.partition(" arrived last at ")[0] for l in lines}) == 1,
          "the same straggler on both nodes", lines)
    check(lines[0].startswith("straggler: rank 3 on localhost (127.0.0.2) arrived last at "),
          "rank 3 and its host named", lines)
    margin = float(lines[0].partition("by a median of ")[2].partition(" s")[0])
    # The straggler sleeps 0.3 s before each all_reduce, the others 0.02 s; on a loaded
    # machine the others' short sleeps stretch too, and the margin shrinks (0.185 s in a
    # fresh clone's run of 2026-11-30 with four tests at once): still far above the 0.05 s
    # threshold, and below the sleep.
    check(0.1 < margin < 0.35, "the margin is the sleep's", lines)


@test(tier="214")
def straggler_none_named_in_a_steady_job(c):
    """Issue 34, no false alarm: 2 nodes x 2 ranks, PyTorch 2.14's flight recorder,
    --straggler-window 3; for 20 s every rank does the same (0.02 s, then an all_reduce):
    some hundreds of collectives. Neither node names a straggler; node 0 says at the end
    that it ranked the job's windows (several, each with all four ranks) and that none
    named one; the job succeeds."""
    port = c.reserve_port()
    extra = ["--nproc-per-node=2", "--stall-timeout=60", "--straggler-window=3",
             "--max-restarts=0"]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "steady", extra), ["steady", "20"],
                      script=JOB_WORKER, env={"LOGLEVEL": "INFO"})
              for i in range(2)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    steps = [int(l.split("steady: ")[1].split()[0]) for l in agents[0].text().splitlines()
             if "steady: " in l]
    check(steps and steps[0] >= 200, f"some hundreds of all_reduces: {steps}", c.logs())
    for a in agents:
        check(not [l for l in a.text().splitlines() if "straggler: " in l],
              f"{a.name} names no straggler", c.logs())
    summary = [l for l in agents[0].text().splitlines()
               if "straggler ranking: " in l and " window(s) of the job ranked" in l]
    ranked = int(summary[-1].split("straggler ranking: ")[1].split()[0]) if summary else 0
    check(ranked >= 3 and summary[-1].endswith("ranked, 0 naming a straggler"),
          "node 0 ranked several windows, none naming a straggler", summary or c.logs())


@test(tier="214")
def straggler_left_out_and_job_goes_on(c):
    """Issue 34's --exclude-stragglers over c10d (cluster.straggler_left_out): rank 2 late at
    every all_reduce; node 0 leaves node 2 out after 3 rankings, node 2 exits 1 saying why
    and goes on the --blocklist; nodes 0 and 1 go on in a round of 2, no restart spent."""
    port = c.reserve_port()
    straggler_left_out(c, lambda i, extra: c10d_args(i, port, "2:3", "strag_out", extra))

@test(tier="214")
def status_shows_every_node_rank_place_and_collective(c):
    """Issue 32 item 1: 2 nodes x 2 ranks, --stall-timeout 60; the last rank (3, on node 1)
    sleeps 12 s in Python before an all_reduce the others wait in. Meanwhile `ddprun status`
    (read-only, from outside the job) names both nodes and all four ranks with their pids,
    rank 3 at the sleep's file:line, and (PyTorch 2.14's flight recorder) ranks 0-2 in the
    all_reduce; the text table shows the same. The job still succeeds; afterwards status
    says the run has ended (exit 7), and an unknown run id is exit 4, both within seconds."""
    port = c.reserve_port()
    extra = ["--nproc-per-node=2", "--stall-timeout=60", "--max-restarts=0"]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "status_job", extra), ["doze", "12"],
                      script=JOB_WORKER) for i in range(2)]
    where = f"job_worker.py:{_marked_line(JOB_WORKER, '# STATUS-SLEEP')}"
    read = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=status_job"]

    def shown():
        time.sleep(0.5)  # a value every 2 s: no need to start an ASan ddprun every 50 ms
        rc, out, _, _ = ddprun_status(c, *read, "--json")
        if rc != 0:
            return None
        job = json.loads(out)
        ranks = {r["rank"]: r for n in job["nodes"] for r in n.get("ranks", [])}
        if sorted(ranks) != [0, 1, 2, 3] or where not in ranks[3].get("where", ""):
            return None
        if any("in all_reduce" not in _status_collective(ranks[r]) for r in range(3)):
            return None
        return job

    job = poll(shown, 40, "status names every rank, rank 3's sleep and the all_reduce",
               c.logs)
    check([n["node"] for n in job["nodes"]] == [0, 1]
          and all(n["state"] == "running" and n["host"] for n in job["nodes"]),
          "both nodes, running", job)
    check(all(r["pid"] > 0 for n in job["nodes"] for r in n["ranks"]), "every rank's pid", job)
    rc, table, err, took = ddprun_status(c, *read)
    check(rc == 0 and where in table and table.count("in all_reduce #") >= 3
          and all(f"\n      {r} " in table for r in range(4)), "the text table", table + err)
    rc, _, err, took = ddprun_status(c, "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                                     "--rdzv-id=no_such_job")
    check(rc == 4 and "no run 'no_such_job'" in err and took < 15, "an unknown run id", err)
    for a in agents:
        check(a.wait(60) == 0, f"{a.name} failed: the status reads disturbed the job", c.logs())
    rc, _, err, took = ddprun_status(c, *read)
    # The store went with its host: unreachable (3) once it is gone, ended (7) before.
    check(rc in (3, 7) and took < 15 and len(err.splitlines()) == 1, "after the job", err)


def _status_collective(rank):
    groups = [g for g in rank.get("collectives", []) if g["entered"] >= 0]
    if not groups:
        return ""
    g = min(groups, key=lambda g: g["pg"])
    return ("after " if g["completed"] >= g["entered"] else "in ") + g["op"].split(":")[-1]


@test(needs_torch=False)
def status_bad_input_one_line_and_its_exit_code(c):
    """`ddprun status` where it cannot show a job, against a ddprun-store holding what the
    rendezvous would: each case one line on stderr, its own exit code, within seconds:
    nothing listening (3), no such run id (4), a run with no round formed yet (5), a node's
    value that is not a status (6: the table is printed without it), a corrupt round key
    (6), the run ended (7, --watch too), no endpoint (2)."""
    store_bin = os.path.join(os.path.dirname(os.path.dirname(c.ddprun)), "store", "ddprun-store")
    port, idle = c.reserve_port(), c.reserve_port()
    addr = f"127.0.0.1:{port}"
    server = subprocess.Popen([store_bin, "serve", "--host=127.0.0.1", f"--port={port}"],
                              stdout=subprocess.PIPE, text=True)
    try:
        check("listening" in server.stdout.readline(), "the store serves")

        def put(run_id, key, value):
            subprocess.run([store_bin, "set", f"--addr={addr}", f"ddprun/rdzv/{run_id}/{key}",
                            value], check=True, capture_output=True)

        def status(endpoint, run_id, *more):
            rc, out, err, took = ddprun_status(c, "--rdzv-backend=c10d",
                                               f"--rdzv-endpoint={endpoint}",
                                               f"--rdzv-id={run_id}", *more)
            # A bound against hanging, not a speed: an ASan ddprun's start alone took 8 s in
            # a fresh clone beside the 256-agent test's load. Each read's own bound is
            # --timeout (3 s, 1 s below).
            check(took < 15 and len(err.strip().splitlines()) == 1, "one line, without hanging",
                  (rc, out, err, took))
            return rc, out, err

        # Refused connections are tried again until --timeout (a store host restarting).
        rc, _, err = status(f"127.0.0.1:{idle}", "j", "--timeout=1")
        check(rc == 3 and "cannot be reached" in err and "within 1000 ms" in err,
              "nothing listening", err)
        rc, _, err = status(addr, "j")
        check(rc == 4 and f"c10d at {addr}: no run 'j' (" in err, "no such run id", err)
        put("forming", "job", '["train.py"]')
        rc, _, err = status(addr, "forming")
        check(rc == 5 and "no round formed yet" in err, "no round yet", err)
        for key, value in [("job", "x"), ("round", "0"), ("r0/final", "2"),
                           ("r0/view/status/0", "garbage")]:
            put("foreign", key, value)
        rc, out, err = status(addr, "foreign")
        check(rc == 6 and err.startswith("ddprun status: node 0: not a ddprun status value: "
                                         "'garbage'"), "a foreign value", err)
        check("\n0     -                        not a ddprun status value" in out
              and "\n1     -                        no status yet" in out, "the table", out)
        put("corrupt", "round", "zz")
        rc, _, err = status(addr, "corrupt")
        check(rc == 6 and "corrupt rendezvous key round = 'zz'" in err, "a corrupt key", err)
        put("ended", "closed", "1")
        rc, _, err = status(addr, "ended")
        check(rc == 7 and "has ended" in err, "the run ended", err)
        rc, _, err = status(addr, "ended", "--watch")
        check(rc == 7 and "has ended" in err, "--watch ends with the run", err)
        rc, _, err, _ = ddprun_status(c, "--rdzv-id=j")
        check(rc == 2 and "--rdzv-endpoint is needed" in err, "no endpoint", err)
    finally:
        server.terminate()
        server.wait(10)


@test(tier="214")
def startup_names_a_rank_slow_to_import(c):
    """Issue 32's start-up timeline: 2 nodes x 2 ranks on 2.14 with --stall-timeout; rank 3
    (node 1) sleeps 30 s before `import torch` (more than the others' import: a fresh
    clone's loaded machine took 12 s to import torch in 4 ranks at once, and a rank stands
    out at twice the median). The node that ranks the job (group rank 0)
    logs one summary line per phase and a warning naming rank 3, its host and the phase;
    the named node logs the warning too; the first node's run record has every rank's
    phases."""
    port = c.reserve_port()
    recs = [os.path.join(c.dir, f"rec{i}.json") for i in range(2)]
    script = os.path.join(HERE, "workers", "slow_import.py")
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "slow_import",
                                            ["--nproc-per-node=2", "--stall-timeout=60",
                                             f"--record-file={recs[i]}"]),
                      ["3", "30"], script=script, env={"LOGLEVEL": "INFO"}) for i in range(2)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    for a in agents:
        warn = [l for l in a.text().splitlines() if "warning: start-up: " in l]
        check(len(warn) == 1 and "start-up: rank 3 on localhost (127.0.0.2) took " in warn[0]
              and " s to import torch (median of 4 ranks " in warn[0],
              f"{a.name}: the warning names rank 3, its host and the phase", c.logs())
    records = []
    for rec in recs:
        with open(rec) as f:
            records.append(json.load(f)["startup"])
    whole = max(records, key=len)
    check(sorted(r["rank"] for r in whole) == [0, 1, 2, 3], "every rank in one record", records)
    slow = next(r for r in whole if r["rank"] == 3)["phases"]["import_torch_s"]
    check(slow is not None and slow >= 30, "rank 3's import includes its 30 s", whole)
    summary = [l for a in agents for l in a.text().splitlines() if "info: start-up: " in l]
    check(any("start-up: import torch: median " in l and "slowest rank 3 on " in l
              for l in summary), "the summary line", c.logs())


@test(tiers=("113", "214"))
def root_cause_named_on_every_node(c):
    """Issue 32: 2 nodes, no restarts; the last rank raises ValueError while rank 0 waits
    in an all_reduce, which then fails on the closed connection. Both nodes print the same
    root-cause line first, naming rank 1, its host and the ValueError; the node of rank 0
    still reports its own rank's failure below it (torchrun's report)."""
    port = c.reserve_port()
    recs = [os.path.join(c.dir, f"rec{i}.json") for i in range(2)]
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "root_cause",
                                            ["--max-restarts=0", f"--record-file={recs[i]}"]),
                      ["raise"], script=JOB_WORKER) for i in range(2)]
    for a in agents:
        check(a.wait(120) != 0, f"{a.name} must fail", c.logs())
    lines = []
    for a in agents:
        text = a.text()
        found = [l for l in text.splitlines() if "root cause (job-wide): " in l]
        check(len(found) == 1, f"{a.name}: one root-cause line", c.logs())
        line = found[0][found[0].index("root cause (job-wide): "):]
        lines.append(line)
        check(line.startswith("root cause (job-wide): rank 1 on ") and "(127.0.0." in line
              and "ValueError: boom on the last rank" in line, "rank 1's ValueError", line)
        check(text.index("root cause (job-wide): ") < text.index("Root Cause (first observed"),
              f"{a.name}: the line before the node's report", text)
    check(lines[0].split("; ")[0] == lines[1].split("; ")[0], "one root cause", c.logs())
    for rec, line in zip(recs, lines):
        with open(rec) as f:
            r = json.load(f)
        check(r["root_cause"] == line and r["exit_class"] == "worker error", "the record", r)
    other = next(a for a in agents if "rank      : 0 " in a.text())
    check("this node's below are most likely its consequences" in other.text(),
          "rank 0's node calls its own failure a consequence", c.logs())


@test
def exit_code_classes_node_lost(c):
    """Issue 32: --exit-codes classes, 2 nodes, no restarts; node 1's agent is SIGKILLed
    (its worker dies with it) while both train. Node 0's rank fails on the closed
    connection: that is no error of its own, so node 0 exits 3 (infrastructure), not 1."""
    port = c.reserve_port()
    conf = FAST.replace("join_timeout=60", "join_timeout=10")
    agents = [c.start(f"node{i}", c10d_args(i, port, 2, "node_lost",
                                            ["--exit-codes=classes", "--max-restarts=0"], conf),
                      ["--until-world", "99"]) for i in range(2)]
    poll(lambda: all(a.records() for a in agents), 90, "both workers running", c.logs)
    agents[1].kill()
    rc = agents[0].wait(90)
    check(rc == 3, f"node 0 exited {rc}, expected 3 (infrastructure)", c.logs())


@test(tiers=("113", "214"))
def preflight_passes_then_workers_run(c):
    """Issue 34: 3 nodes, --preflight: the check runs once with the tier's torch (its
    TCPStore client on the workers' store, gloo's all_reduce and ring transfers), node 0
    prints the whole table (every node ok, a collective and link time each), and the
    workers then train in the same round: one round, no restart."""
    port = c.reserve_port()
    agents = [c.start(f"node{i}", c10d_args(i, port, 3, "pf_ok", ["--preflight"]))
              for i in range(3)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
        check(len(a.records()) == 1 and a.records()[0]["allreduce_ok"], "one round", c.logs())
    tables = [a.text() for a in agents if "pre-flight check passed on 3 node(s)" in a.text()]
    check(len(tables) == 1, "node 0 prints the table", c.logs())
    rows = [l for l in tables[0].splitlines() if l[:1].isdigit()]
    check(len(rows) == 3 and all(l.rstrip().endswith(" ok") for l in rows), "3 rows, all ok",
          tables[0])
    check(all(l.count(" s ") >= 4 for l in rows), "import, device, collective and link times",
          tables[0])


@test
def preflight_waits_are_no_stall(c):
    """Issue 34 with --stall-timeout 1: node2's check starts 4 s late (a sitecustomize that
    sleeps in the check's interpreter only, as a slow file system would), so the others'
    checks wait for it without progress of their own for longer than the stall timeout:
    the stall watchdog leaves the check alone, the verdict is ok, the job succeeds."""
    port = c.reserve_port()
    site = os.path.join(c.dir, "slow_check_site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write("import os, time\nif 'DDPRUN_PREFLIGHT_NODE' in os.environ:\n"
                "    time.sleep(4)\n")
    # The workers are /bin/true: the check's waits are what is judged here, not a worker's
    # own start on a loaded machine (which a 1 s timeout may well call a stall).
    agents = [c.start(f"node{i}", c10d_args(i, port, 3, "pf_stall",
                                            ["--preflight", "--stall-timeout=1", "--no-python"]),
                      script="/bin/true", env={"PYTHONPATH": site} if i == 2 else None)
              for i in range(3)]
    for a in agents:
        check(a.wait(120) == 0, f"{a.name} failed", c.logs())
    check(not any("BAD" in a.text() or "stall" in a.text() for a in agents),
          "no node bad, no stall line", c.logs())
    check(any("pre-flight check passed on 3 node(s)" in a.text() for a in agents),
          "the check passed", c.logs())


@test
def preflight_bad_python_left_out_spare_takes_its_place(c):
    """Issue 34: --nnodes 2:3 --preflight, three nodes form a round; node1's PYTHON_EXEC
    cannot import torch. Every node's table names node1 (127.0.0.2) and why; node1 leaves
    the job (exit 3 with --exit-codes classes), and the others go on in a new round that a
    fourth node, started once the verdict is out, joins (at once or as a membership
    change), its check run then: the workers run in a world of 3 on nodes 0, 2 and 3."""
    port = c.reserve_port()
    extra = ["--preflight", "--exit-codes=classes", "--max-restarts=0", "--log-dir", c.dir]
    bad = {"PYTHON_EXEC": venv_without_torch(c)}
    wargs = ["--until-world", "3"]
    agents = [c.start(f"node{i}", c10d_args(i, port, "2:3", "pf_spare", extra), wargs,
                      env=bad if i == 1 else None) for i in range(3)]
    poll(lambda: "pre-flight check found 1 bad node" in agents[0].text(), 90, "the verdict",
         c.logs)
    agents.append(c.start("node3", c10d_args(3, port, "2:3", "pf_spare", extra), wargs))
    check(agents[1].wait(120) == 3, "node1 exits 3 (infrastructure)", c.logs())
    for i in (0, 2, 3):
        check(agents[i].wait(150) == 0, f"node{i} failed", c.logs())
    for i in (0, 2):
        text = agents[i].text()
        check("BAD: import torch: ModuleNotFoundError: No module named 'torch'" in text
              and "(127.0.0.2)" in text, f"node{i}'s table names node1 and why", text)
        check("the job goes on without the bad node(s)" in text, f"node{i} goes on", text)
    check("this node is left out of the job" in agents[1].text(), "node1 says it leaves",
          agents[1].text())
    check(not agents[1].records(), "node1 ran no worker", agents[1].records())
    worlds = sorted((a.records()[-1]["WORLD_SIZE"], a.name) for i, a in enumerate(agents) if i != 1)
    check([w for w, _ in worlds] == ["3", "3", "3"], f"a world of 3 without node1: {worlds}",
          c.logs())
    passed = [a.name for a in agents if "pre-flight check passed on 3 node(s)" in a.text()]
    check(len(passed) == 1, f"the spare's round was checked; node 0 shows the table: {passed}",
          c.logs())


@test
def preflight_cpu_throttled_node_is_slow_and_left_out(c):
    """Issue 34: 3 nodes, --nnodes 2:3 --preflight; node2 (127.0.0.3) and everything it
    starts run in a cgroup limited to a tenth of one CPU (cgroup v2 cpu.max, else v1's CFS
    quota: tests/support/cpu_limit.py), as a host whose CPU is throttled. Every node's
    verdict names node2 as slower than the median (its devices, or its links), node2 leaves
    the job (exit 3 with --exit-codes classes) and the two others train in a world of 2."""
    limit = CpuLimit(f"ddprun_test_{os.getpid()}", 0.1)
    try:
        port = c.reserve_port()
        # A slow factor of 2, not the default 3: on a machine busy with other tests the two
        # free nodes get little CPU too, and a fresh clone's run saw the throttled node's
        # devices at 2.8 times the median (its links 2.4); the free ones stay near 1.
        extra = ["--preflight", "--preflight-slow-factor=2", "--exit-codes=classes",
                 "--max-restarts=0"]
        agents = [c.start(f"node{i}", c10d_args(i, port, "2:3", "pf_cpu", extra),
                          prefix=limit.prefix() if i == 2 else (), gloo_ifname=False)
                  for i in range(3)]
        check(agents[2].wait(150) == 3, f"node2 exits 3 (infrastructure) [{limit.kind}]",
              c.logs())
        for i in (0, 1):
            check(agents[i].wait(150) == 0, f"node{i} failed", c.logs())
        for a in agents:
            found = [l for l in a.text().splitlines() if "(127.0.0.3) is bad: " in l]
            check(found and ("devices took " in found[0] or "its links took " in found[0])
                  and "against a median of " in found[0],
                  f"{a.name}: node2 named slow against the median", a.text())
        for i in (0, 1):
            worlds = {r["WORLD_SIZE"] for r in agents[i].records()}
            check(worlds == {"2"}, f"node{i} trained in a world of 2: {worlds}", c.logs())
        check(not agents[2].records(), "node2 ran no worker", c.logs())
    finally:
        c.close()
        limit.close()


@test
def preflight_left_out_node_started_again_does_not_rejoin(c):
    """Issue 34: --nnodes 2:3 --preflight, node1 (no torch) is left out and the two others
    train; node1 started again (as a scheduler restarts a failed pod), without --blocklist,
    is refused at its first join, naming why, and the running nodes go on undisturbed:
    one round each, exit 0."""
    port = c.reserve_port()
    agents, _ = left_out_then_started_again(
        c, lambda i, extra: c10d_args(i, port, "2:3", "pf_again", extra))
    for i in (0, 2):
        check(agents[i].wait(120) == 0, f"node{i} failed", c.logs())
        worlds = [r["WORLD_SIZE"] for r in agents[i].records()]
        check(worlds == ["2"], f"node{i}: one round of 2, not disturbed: {worlds}", c.logs())


@test
def preflight_fixed_nnodes_stops_and_blocklist_keeps_out(c):
    """Issue 34: --nnodes 3 --preflight --blocklist FILE; node1 cannot import torch. No
    room to leave it out: every node stops before its workers start, naming node1, and
    exits 3; the block-list then lists 127.0.0.2, and node1's next launch does not join
    (one line naming the file and why) while the two others wait as before."""
    port = c.reserve_port()
    blocklist = os.path.join(c.dir, "bad-hosts")
    extra = ["--preflight", "--exit-codes=classes", f"--blocklist={blocklist}"]
    bad = {"PYTHON_EXEC": venv_without_torch(c)}
    agents = [c.start(f"node{i}", c10d_args(i, port, 3, "pf_fixed", extra),
                      env=bad if i == 1 else None) for i in range(3)]
    for a in agents:
        check(a.wait(120) == 3, f"{a.name} exits 3 (infrastructure)", c.logs())
        check("the job stops before its workers start" in a.text()
              and "(127.0.0.2) is bad: import torch" in a.text(), f"{a.name} names node1",
              a.text())
        check(not a.records(), f"{a.name} started no worker", a.records())
    with open(blocklist) as f:
        lines = [l.split() for l in f.read().splitlines()]
    check([l[0] for l in lines] == ["127.0.0.2"] and "import" in lines[0][2:],
          "the block-list names node1 once, with a time and why", lines)
    again = c.start("node1_again", c10d_args(1, port, 3, "pf_fixed2", extra), env=bad)
    check(again.wait(30) == 3, "a blocked host exits 3", again.text())
    check(f"is on the block-list {blocklist} since " in again.text()
          and "import torch" in again.text(), "one line naming the file and why", again.text())


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(suite.main(sys.argv, Cluster))
