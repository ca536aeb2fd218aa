#!/usr/bin/env python3
"""Black-box tests of `ddprun --hosts` / `--hostfile`: one command starts an agent per host
over the system's OpenSSH client, with real sshd servers and real PyTorch gloo workers.

    ssh_test.py <path to ddprun> <test name>     (ctest runs one test per process)
    ssh_test.py - --list                 (CMake registers the tests from it)

Each test host is a network namespace (tests/support/netns.py) running its own
/usr/sbin/sshd with a configuration, host key, client key and authorized_keys generated in
the test's directory (port 22 of the namespace's own address; nothing of the system's
ssh configuration is read or changed). The launcher runs in node 0's namespace, so node 0
is both the launching host and the first host (the rendezvous endpoint). Every host
shares this machine's file system and process table, so "nothing left on any host" is a
scan of /proc for the test's tag. Skipped (exit 77) without root, namespaces, sshd or torch.
"""
import glob
import os
import re
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
SSHD = "/usr/sbin/sshd"
suite = blackbox.Suite(__doc__, needs_torch=True)
test = suite.test
FAST = "last_call_timeout=1,join_timeout=60"
# For a 2:3 job that must start on all three hosts: the round forms the moment the third
# joins (its max), and a third host slower than FAST's 1 s last call (ssh and an ASan agent
# starting on a loaded machine) does not leave a round of two behind, whose workers end the
# job at once (a fresh clone's ssh.silent_host_named_and_left: host 3 then found no store).
# The round of two after a host is lost waits this last call too.
ALL_THREE = "last_call_timeout=10,join_timeout=60"


class SshHosts(blackbox.Workspace):
    """Namespaces with an sshd each, the keys, and the launcher's ssh command."""

    def __init__(self, ddprun):
        super().__init__(ddprun, "ddprun_ssh_")
        self.net = None
        self.t0 = time.monotonic()
        self.out = os.path.join(self.dir, "out")
        os.makedirs(self.out)

    def start_hosts(self, n, with_sshd=None, listen=None, setup=None):
        """n namespaces; sshd in those listed in with_sshd (default: all), on each host's
        address and listen[i] when given; setup(net) runs before the sshds start."""
        for tool in (SSHD, "ssh", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise Skip(f"{tool} is not installed")
        self.net = netns_or_skip(n)
        if setup:
            setup(self.net)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
        key = os.path.join(self.dir, "client_key")
        hostkey = os.path.join(self.dir, "host_key")
        for k in (key, hostkey):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k], check=True)
        shutil.copy(key + ".pub", os.path.join(self.dir, "authorized_keys"))
        self.ssh_command = (f"ssh -i {key} -o StrictHostKeyChecking=no -o LogLevel=ERROR "
                            f"-o UserKnownHostsFile={self.dir}/known_hosts -o ConnectTimeout=10")
        self.sshd_logs = []
        self.sshd_pids = set()
        for i in range(n) if with_sshd is None else with_sshd:
            conf = os.path.join(self.dir, f"sshd_{i}.conf")
            with open(conf, "w") as f:
                extra = f"ListenAddress {listen[i]}\n" if listen and i in listen else ""
                f.write(f"Port 22\nListenAddress {Netns.addr(i)}\n{extra}HostKey {hostkey}\n"
                        f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
                        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
                        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                        f"PidFile {self.dir}/sshd_{i}.pid\nPrintMotd no\nLogLevel INFO\n")
            log = os.path.join(self.dir, f"sshd_{i}.log")
            self.sshd_logs.append(log)
            sshd = self.start_process([*self.net.prefix(i), SSHD, "-D", "-e", "-f", conf],
                                      os.environ, log=log, new_session=True)
            self.sshd_pids.add(sshd.pid)  # `ip netns exec` execs sshd: the same pid
            poll(lambda: "Server listening" in blackbox.read_text(log), 30,
                 f"sshd {i} listening", lambda: blackbox.read_text(log))

    def host(self, i):
        return Netns.addr(i)

    def launch(self, args, worker_args=(), log="launcher.log", program=None):
        """Starts the launcher in node 0's namespace: ddprun ARGS PROGRAM, by default
        mn_worker.py WORKER_ARGS."""
        env = blackbox.job_environment(drop=(*blackbox.LAUNCHER_VARIABLES, "MASTER_"),
                                       TMPDIR=self.dir, MN_OUT=self.out,
                                       GLOO_SOCKET_IFNAME="mn0")
        self.log = os.path.join(self.dir, log)
        print(f"{time.monotonic() - self.t0:5.1f} s: {log}", flush=True)
        argv = [*self.net.prefix(0), self.ddprun, "--ssh-command", self.ssh_command,
                "--env", "MN_OUT", *args, *(program or [WORKER, *worker_args])]
        return self.start_process(argv, env, log=self.log, new_session=True)

    def text(self):
        return blackbox.read_text(self.log)

    def records(self):
        return blackbox.json_records(self.out)

    def leftovers(self):
        """Processes of this test's job on any host: the tag (the test directory) in their
        command line or environment; the test itself and the sshd listeners excluded."""
        found = []
        for d in glob.glob("/proc/[0-9]*"):
            pid = int(d[6:])
            if pid == os.getpid() or pid in getattr(self, "sshd_pids", ()):
                continue
            try:
                with open(d + "/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ")
                with open(d + "/environ", "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if self.dir.encode() in cmd or self.dir.encode() in env:
                found.append(f"{pid}: {cmd.decode(errors='replace')[:160]}")
        return found

    def wait(self, proc, timeout):
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"launcher still running after {timeout} s\n--- {self.text()}")

    def close(self):
        super().close()
        if self.net:
            self.net.close()


def hosts_arg(c, n, slots=None):
    return ",".join(c.host(i) + (f":{slots[i]}" if slots and slots.get(i) else "")
                    for i in range(n))


@test
def three_hosts_one_command(c):
    """A 3-host gloo DDP job (4 workers, from a hostfile) from one command: every rank's
    record, node ranks in file order, output of every host on the launcher's terminal under
    its host prefix, line-intact, the per-host logs under --log-dir, exit status 0."""
    c.start_hosts(3)
    logs = os.path.join(c.dir, "hostlogs")
    hostfile = os.path.join(c.dir, "hostfile")
    with open(hostfile, "w") as f:
        f.write(f"# DeepSpeed's format\n{c.host(0)}\n\n{c.host(1)} slots=2  # two workers\n"
                f"{c.host(2)} slots=1\n")
    p = c.launch(["--hostfile", hostfile, f"--rdzv-conf={FAST}", "--log-dir", logs])
    check(c.wait(p, 180) == 0, "the job succeeds", c.text())
    recs = c.records()
    check(sorted(int(r["RANK"]) for r in recs) == [0, 1, 2, 3], "four ranks", recs, c.text())
    check(all(r["WORLD_SIZE"] == "4" and r["allreduce_ok"] for r in recs), "layout", recs)
    by_group = {int(r["RANK"]): int(r["GROUP_RANK"]) for r in recs}
    check(by_group == {0: 0, 1: 1, 2: 1, 3: 2}, f"node ranks in host order: {by_group}")
    out = c.text()
    for rank, host in ((0, 0), (1, 1), (2, 1), (3, 2)):
        line = f"[{c.host(host)}]:rank {rank} of 4 done"
        check(re.search("^" + re.escape(line) + "$", out, re.M), f"line-intact: {line}", out)
    for i in range(3):
        with open(os.path.join(logs, c.host(i), "stdout.log")) as f:
            check("done" in f.read(), f"host {i}'s stdout log", out)
    poll(lambda: not c.leftovers(), 30, "nothing left", c.leftovers, c.text)


# The stop and failure tests run shell workers (no torch import: fast); every worker
# leaves a file named after its rank in MN_OUT, and `sh -c` gets its script through the
# remote shell's quoting like any argument.
def shell_worker(script):
    return ["--no-python", "sh", "-c", 'touch "$MN_OUT/$RANK"; ' + script]


def ranks_started(c):
    return sorted(int(f) for f in os.listdir(c.out) if f.isdigit())


@test(needs_torch=False)
def stop_and_kill_leave_nothing(c):
    """Ctrl-C (SIGINT) on the launcher mid-run stops every host's agent and worker (grace,
    then kill); kill -9 of the launcher leaves no process on any host after a short bound."""
    c.start_hosts(3)
    # The worker ignores SIGTERM: the remote agent's grace, then its SIGKILL, must end it.
    worker = shell_worker("trap '' TERM; while :; do sleep 0.2; done")
    for how in ("sigint", "sigkill"):
        for f in os.listdir(c.out):
            os.unlink(os.path.join(c.out, f))
        p = c.launch(["--hosts", hosts_arg(c, 3), f"--rdzv-conf={FAST}", "--shutdown-timeout",
                      "2"], log=f"{how}.log", program=worker)
        poll(lambda: ranks_started(c) == [0, 1, 2], 120, f"{how}: three workers running",
             c.text)
        if how == "sigint":
            os.kill(p.pid, signal.SIGINT)
            check(c.wait(p, 60) == 1, "a stopped job exits 1", c.text())
            check("received SIGINT" in c.text(), "the launcher says why", c.text())
        else:
            os.kill(p.pid, signal.SIGKILL)
            c.wait(p, 10)
        poll(lambda: not c.leftovers(), 30, f"{how}: no process left on any host",
             c.leftovers, c.text)


@test(needs_torch=False)
def failures_named_by_host(c):
    """An unreachable host (no sshd) is named in one line: with --nnodes 2:3 the job runs
    without it; with 3 nodes required the others are stopped. A host whose worker fails is
    named with its node rank and the failed rank; a missing remote ddprun names the host."""
    c.start_hosts(3, with_sshd=[0, 1])
    gone = c.host(2)

    p = c.launch(["--hosts", hosts_arg(c, 3)], log="required.log", program=shell_worker(""))
    check(c.wait(p, 60) == 1, "3 of 3 required: the job fails", c.text())
    t = c.text()
    check(re.search(rf"^ddprun: error: host {re.escape(gone)}: ssh failed \(exit 255\): .*"
                    r"Connection refused$", t, re.M), "the unreachable host, in one line", t)
    poll(lambda: not c.leftovers(), 30, "the other hosts' agents stopped", c.leftovers, c.text)

    p = c.launch(["--hosts", hosts_arg(c, 2), "--remote-ddprun", "/nonexistent/ddprun"],
                 log="missing.log", program=shell_worker(""))
    check(c.wait(p, 60) == 1, "no remote ddprun: the job fails", c.text())
    t = c.text()
    for i in range(2):
        check(f"ddprun: error: host {c.host(i)}: cannot run /nonexistent/ddprun there" in t,
              f"host {i} named", t)

    p = c.launch(["--hosts", hosts_arg(c, 3), "--nnodes", "2:3", f"--rdzv-conf={FAST}"],
                 log="elastic.log", program=shell_worker('[ "$RANK" != 1 ] || exit 3'))
    check(c.wait(p, 120) == 1, "a failed worker fails the job", c.text())
    t = c.text()
    check(f"ddprun: error: host {gone}: ssh failed" in t, "the unreachable host", t)
    check(ranks_started(c) == [0, 1], "the job ran on the two reachable hosts", t)
    check(re.search(rf"^ddprun: error: host {re.escape(c.host(1))} \(node rank 1\) failed with "
                    r"exit code 1: rank 1 \(local_rank: 0\)$", t, re.M),
          "the failed host, its node rank and the failed rank", t)
    poll(lambda: not c.leftovers(), 30, "nothing left", c.leftovers, c.text)


@test(needs_torch=False)
def stdin_eof_stops_the_agent(c):
    """The remote end without ssh (runs as any user): an agent started with
    --exit-on-stdin-eof stops its workers (as on SIGTERM) when its stdin pipe closes, and
    a launcher whose ssh client cannot be started says so in one line."""
    env = blackbox.job_environment(TMPDIR=c.dir, DDPRUN_SSH_TEST_TAG=c.dir)
    r, w = os.pipe()
    log = os.path.join(c.dir, "agent.log")
    with open(log, "w") as out:
        p = subprocess.Popen([c.ddprun, "--exit-on-stdin-eof", "--no-python", "--shutdown-timeout",
                              "5", "sleep", "1000"], stdin=r, stdout=out,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
    os.close(r)
    c._procs.append((p, True))
    poll(lambda: len(c.leftovers()) >= 2, 30, "agent and worker running", c.leftovers)
    os.close(w)
    try:
        code = p.wait(30)
    except subprocess.TimeoutExpired:
        raise Failed("the agent did not stop at end of stdin", blackbox.read_text(log))
    check(code == 1, f"a stopped agent exits 1, not {code}", blackbox.read_text(log))
    check("stdin reached end of file" in blackbox.read_text(log), "it says why",
          blackbox.read_text(log))
    poll(lambda: not c.leftovers(), 10, "its worker is gone", c.leftovers)

    # Its workers read end of file, not the session's pipe (which stays open here).
    r, w = os.pipe()
    log = os.path.join(c.dir, "reader.log")
    with open(log, "w") as out:
        p = subprocess.Popen([c.ddprun, "--exit-on-stdin-eof", "--no-python", "sh", "-c",
                              "read x || echo worker read end of file"], stdin=r, stdout=out,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
    os.close(r)
    c._procs.append((p, True))
    try:
        code = p.wait(30)
    except subprocess.TimeoutExpired:
        raise Failed("the worker waits on the session's pipe", blackbox.read_text(log))
    finally:
        os.close(w)
    check(code == 0 and "worker read end of file" in blackbox.read_text(log),
          f"the worker read end of file (exit {code})", blackbox.read_text(log))

    code, out, err = c.run_process([c.ddprun, "--hosts", "127.0.0.1", "--ssh-command",
                                    "/nonexistent/ssh -x", "--no-python", "true"], env, 30)
    check(code == 1, f"exit 1, not {code}", out, err)
    check("cannot execute '/nonexistent/ssh'" in err and len(err.strip().splitlines()) <= 2,
          "one line naming the ssh command", err)


@test(needs_torch=False)
def remote_workers_read_end_of_file(c):
    """Issue 31 item 17: a remote worker that reads its stdin (input(), breakpoint(), here
    `read`) gets end of file at once instead of waiting forever on the ssh session's pipe,
    which the launcher never writes (`echo bob | ddprun --hosts a,b prog`)."""
    c.start_hosts(2)
    worker = shell_worker('if read x; then echo "rank $RANK read $x"; '
                          'else echo "rank $RANK read end of file"; fi')
    p = c.launch(["--hosts", hosts_arg(c, 2), f"--rdzv-conf={FAST}"], log="read.log",
                 program=worker)
    check(c.wait(p, 90) == 0, "the job ends", c.text())
    for i in range(2):
        check(f"[{c.host(i)}]:rank {i} read end of file" in c.text(), f"rank {i} read EOF",
              c.text())
    poll(lambda: not c.leftovers(), 30, "nothing left", c.leftovers, c.text)


def processes():
    """Every process as (pid, parent pid, argv); one that exits while read is left out."""
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(d + "/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except (OSError, IndexError, ValueError):
            continue
        out.append((int(d[6:]), ppid, argv))
    return out


def children(pid):
    """The pids whose parent is `pid`, with their argv."""
    return [(p, argv) for p, ppid, argv in processes() if ppid == pid]


def agent_argvs(c):
    """The argv of every ddprun agent started over ssh (orphan guards included)."""
    return [argv for _, _, argv in processes()
            if argv and argv[0] == c.ddprun and "--exit-on-stdin-eof" in argv]


def ssh_client_of(c, launcher, i):
    """The pid of the launcher's ssh client for host i."""
    found = [pid for pid, argv in children(launcher.pid) if c.host(i) in argv]
    check(len(found) == 1, f"one ssh client for host {i}: {found}", c.text)
    return found[0]


def remote_agent_of(c, i):
    """The pid of the ddprun agent with --node-rank=i (started over ssh)."""
    def agents():
        found = [pid for pid, _, argv in processes()
                 if argv and argv[0] == c.ddprun and f"--node-rank={i}" in argv and
                 "--exit-on-stdin-eof" in argv]
        # The agent's orphan guard is a forked copy: the agent is the one whose parent is
        # not. A copy forked on its way to exec (a worker's spawn) may be gone before
        # children() looks, so the scan is repeated until it names one agent.
        return [pid for pid in found if not any(pid == child for other in found
                                                for child, _ in children(other))]
    found = poll(lambda: (lambda a: a if len(a) == 1 else None)(agents()), 10,
                 f"one agent of node rank {i}", c.text)
    return found[0]


@test(needs_torch=False)
def lost_ssh_ends_the_job(c):
    """kill -9 of the launcher's ssh client for one host of a fixed 3-node job (a plain host,
    then the rendezvous host) ends the job within seconds, naming the host, and leaves no
    process on any host: a lost host cannot be waited for. In an elastic job (--nnodes 2:3)
    the two hosts left finish it."""
    c.start_hosts(3)
    worker = shell_worker("while :; do sleep 0.2; done")
    for victim in (1, 0):
        for f in os.listdir(c.out):
            os.unlink(os.path.join(c.out, f))
        p = c.launch(["--hosts", hosts_arg(c, 3), f"--rdzv-conf={FAST}", "--shutdown-timeout",
                      "2"], log=f"ssh{victim}.log", program=worker)
        poll(lambda: ranks_started(c) == [0, 1, 2], 120, f"host {victim}: three workers running",
             c.text)
        os.kill(ssh_client_of(c, p, victim), signal.SIGKILL)
        t0 = time.monotonic()
        code = c.wait(p, 30)
        took = time.monotonic() - t0
        t = c.text()
        print(f"ssh of host {victim} killed: the launcher exited {code} after {took:.1f} s")
        check(code == 1, f"a lost host fails the job: exit {code}", t)
        check(re.search(rf"^ddprun: error: host {re.escape(c.host(victim))} \(node rank "
                        rf"{victim}\): the launcher's ssh client for it was killed by SIGKILL",
                        t, re.M), "the host named, in one line", t)
        poll(lambda: not c.leftovers(), 30, f"host {victim}: no process left on any host",
             c.leftovers, c.text)

    # Elastic (--nnodes 2:3): the job shrinks to the two hosts left and finishes there.
    for f in os.listdir(c.out):
        os.unlink(os.path.join(c.out, f))
    elastic = shell_worker('[ "$WORLD_SIZE" = 2 ] && exit 0; while :; do sleep 0.2; done')
    p = c.launch(["--hosts", hosts_arg(c, 3), "--nnodes", "2:3", "--max-restarts", "1",
                  f"--rdzv-conf={ALL_THREE}", "--shutdown-timeout", "2"], log="elastic.log",
                 program=elastic)
    poll(lambda: ranks_started(c) == [0, 1, 2], 120, "elastic: three workers running", c.text)
    os.kill(ssh_client_of(c, p, 2), signal.SIGKILL)
    code = c.wait(p, 60)
    t = c.text()
    check(code == 0, f"elastic: the two hosts left finish the job, exit {code}", t)
    check("the job ran on 2 of 3 hosts" in t, "elastic: the launcher says so", t)
    poll(lambda: not c.leftovers(), 30, "elastic: no process left on any host", c.leftovers,
         c.text)


@test(needs_torch=False)
def killed_agent_named(c):
    """kill -9 of a remote agent is reported as what it is (the agent died of SIGKILL on
    that host; the ssh link was fine), not as an ssh failure with the agent's last stderr
    line as the reason; the fixed-size job then ends, leaving nothing anywhere."""
    c.start_hosts(3)
    # The worker's last stderr line is what was shown as "ssh failed (exit 255): ...".
    worker = shell_worker("echo '*** a banner on stderr ***' >&2; while :; do sleep 0.2; done")
    p = c.launch(["--hosts", hosts_arg(c, 3), f"--rdzv-conf={FAST}", "--shutdown-timeout", "2"],
                 program=worker)
    poll(lambda: ranks_started(c) == [0, 1, 2], 120, "three workers running", c.text)
    os.kill(remote_agent_of(c, 2), signal.SIGKILL)
    code = c.wait(p, 30)
    t = c.text()
    check(code == 1, f"the job fails: exit {code}", t)
    check(re.search(rf"^ddprun: error: host {re.escape(c.host(2))} \(node rank 2\): the ddprun "
                    r"agent there died of SIGKILL \(the remote shell's status 137; the ssh link "
                    r"was fine\)$", t, re.M), "the agent's death, in one line", t)
    check("ssh failed" not in t, "not an ssh failure", t)
    poll(lambda: not c.leftovers(), 30, "no process left on any host", c.leftovers, c.text)


@test(needs_torch=False)
def silent_host_named_and_left(c):
    """Issue 33: a remote host's link drops every packet (an nft rule on the host: no reset,
    no end of file) in a 2:3 job with 1 s heartbeats. The launcher's ssh for it ends after
    its keep-alives (ServerAliveInterval 1 x 4 unanswered, from the heartbeats: 5 s) and the
    launcher names the host in one line; the host's agent, cut off from the rendezvous
    store, stops its worker and exits; the two other hosts finish in a world of 2; the
    launcher exits 0 saying the job ran on 2 of 3 hosts; no process of the job is left."""
    c.start_hosts(3)
    # ssh's own log level (INFO): it says why it gave up ("Timeout, server ... not
    # responding."), which LogLevel=ERROR would keep to itself.
    c.ssh_command = c.ssh_command.replace("LogLevel=ERROR", "LogLevel=INFO")
    worker = shell_worker('[ "$WORLD_SIZE" = 2 ] && exit 0; while :; do sleep 0.2; done')
    conf = f"{ALL_THREE},keep_alive_interval=1,keep_alive_max_attempt=5"
    p = c.launch(["--hosts", hosts_arg(c, 3), "--nnodes", "2:3", f"--rdzv-conf={conf}",
                  "--shutdown-timeout", "2"], program=worker)
    poll(lambda: ranks_started(c) == [0, 1, 2], 120, "three workers running", c.text)
    agent = remote_agent_of(c, 2)
    t0 = time.monotonic()
    c.net.isolate(2)
    line = rf"^ddprun: error: host {re.escape(c.host(2))}: ssh failed \(exit 255\): Timeout, " \
           rf"server {re.escape(c.host(2))} not responding\. \(ssh's keep-alives unanswered"
    poll(lambda: re.search(line, c.text(), re.M), 20, "the launcher names the silent host",
         c.text)
    took = time.monotonic() - t0
    print(f"the launcher named the silent host {took:.1f} s after the drop")
    check(took < 5 + 1 + 2, f"ssh noticed after {took:.1f} s (5 s of keep-alives)", c.text())
    code = c.wait(p, 60)
    t = c.text()
    check(code == 0, f"the two other hosts finish the job: exit {code}", t)
    check("the job ran on 2 of 3 hosts" in t, "the launcher says so", t)
    poll(lambda: not os.path.exists(f"/proc/{agent}"), 10, "the silent host's agent is gone",
         c.leftovers)
    poll(lambda: not c.leftovers(), 30, "no process left on any host", c.leftovers, c.text)


@test(needs_torch=False)
def ssh_alias_hosts(c):
    """Host names that are ssh-config aliases (Host gpuN / HostName ADDRESS, in no
    resolver): the job runs, its endpoint is the address ssh connects to, and only the
    first host's agent is told it hosts the rendezvous (no agent waits join_timeout)."""
    c.start_hosts(3)
    config = os.path.join(c.dir, "ssh_config")
    with open(config, "w") as f:
        for i in range(3):
            f.write(f"Host gpu{i}\n  HostName {c.host(i)}\n")
    c.ssh_command += f" -F {config}"
    go = os.path.join(c.out, "go")
    worker = shell_worker(f"while [ ! -e {go} ]; do sleep 0.2; done")
    p = c.launch(["--hosts", "gpu0,gpu1,gpu2", f"--rdzv-conf={FAST}"], program=worker)
    poll(lambda: ranks_started(c) == [0, 1, 2], 60, "three workers running (no agent waits)",
         c.text)
    told = sorted(next(a for a in argv if a.startswith("--node-rank="))
                  for argv in agent_argvs(c) if "--rdzv-is-host" in argv)
    check(set(told) == {"--node-rank=0"}, f"only node 0 is told it hosts: {told}",
          agent_argvs(c))
    endpoints = {a for argv in agent_argvs(c) for a in argv if a.startswith("--rdzv-endpoint")}
    check(endpoints == {f"--rdzv-endpoint={c.host(0)}:29400"},
          f"the endpoint is gpu0's address: {endpoints}")
    with open(go, "w"):
        pass
    check(c.wait(p, 60) == 0, "the job succeeds", c.text())
    poll(lambda: not c.leftovers(), 30, "nothing left", c.leftovers, c.text)


# An address that reaches host 0 without being one of its interfaces' (as a public or NAT
# address of a cloud machine): host 0 takes the whole range as local (AnyIP route), the
# other hosts route it to host 0.
OUTSIDE = "10.213.1.5"


@test(needs_torch=False)
def first_host_address_not_its_own(c):
    """The first host's name resolves to an address that reaches it but is none of its
    interfaces' (OUTSIDE): its agent cannot tell from addresses that it hosts the
    rendezvous; the launcher tells it, and the job runs instead of every agent retrying
    'Connection refused' until join_timeout."""
    def routes(net):
        net._in(net.nodes[0], "ip", "route", "add", "local", "10.213.1.0/24", "dev", "lo")
        for ns in net.nodes[1:]:
            net._in(ns, "ip", "route", "add", "10.213.1.0/24", "via", Netns.addr(0))
    c.start_hosts(3, listen={0: OUTSIDE}, setup=routes)
    p = c.launch(["--hosts", f"{OUTSIDE},{c.host(1)},{c.host(2)}", f"--rdzv-conf={FAST}"],
                 program=shell_worker(""))
    check(c.wait(p, 60) == 0, "the job succeeds", c.text())
    check(ranks_started(c) == [0, 1, 2], "three ranks", c.text())
    poll(lambda: not c.leftovers(), 30, "nothing left", c.leftovers, c.text)


# A tqdm-like progress bar on stderr ("\r" then the bar, no newline until the end) with
# plain lines between, on stderr (Python's logging) and on stdout (print); each printf is
# a write of its own.
PROGRESS = ('i=0; while [ $i -lt 600 ]; do printf "\\r%3d%%|####| $i/600" $((i / 6)) >&2; '
            'i=$((i + 1)); [ $((i % 25)) = 0 ] && printf "\\nepoch line $i\\n" >&2; '
            '[ $((i % 25)) = 12 ] && echo "print line $i"; '
            '[ $((i % 5)) = 0 ] && sleep 0.01; done; printf "\\n" >&2')


@test(needs_torch=False)
def progress_bars_keep_host_prefixes(c):
    """Two hosts printing \\r progress segments and plain lines at once (stderr and
    stdout, to one merged console): every line, and every \\r segment within it, starts
    with its host's prefix,
    and no line holds segments of two hosts (a segment ended by \\r is not glued to the
    other host's next line)."""
    c.start_hosts(2)
    p = c.launch(["--hosts", hosts_arg(c, 2), f"--rdzv-conf={FAST}"],
                 program=shell_worker(PROGRESS))
    check(c.wait(p, 120) == 0, "the job succeeds", c.text())
    with open(c.log, "rb") as f:
        raw = f.read().decode(errors="replace")
    prefixes = [f"[{c.host(i)}]:" for i in range(2)]
    bad = []
    lines = raw.split("\n")
    for line in lines[:-1]:
        segments = [seg for seg in line.split("\r") if seg]
        owners = {next((p for p in prefixes if seg.startswith(p)), None) for seg in segments}
        if line.startswith("ddprun"):
            continue  # the launcher's own lines
        if None in owners or len(owners) != 1:
            bad.append(repr(line[:200]))
    print(f"{len(lines)} console lines, {len(bad)} mixed or unprefixed")
    check(not bad, f"{len(bad)} lines mixed or unprefixed:\n" + "\n".join(bad[:10]))
    for i in range(2):
        check(raw.count(f"[{c.host(i)}]:epoch line ") == 24, f"host {i}: every stderr line",
              raw[-2000:])
        check(raw.count(f"[{c.host(i)}]:print line ") == 24, f"host {i}: every stdout line",
              raw[-2000:])


@test(needs_torch=False)
def empty_host_list_refused(c):
    """`--hosts ''` and `--hostfile ''` (an unset $HOSTFILE) are usage errors in one line
    (exit 2), not a one-node local job that exits 0."""
    env = blackbox.job_environment(TMPDIR=c.dir, DDPRUN_SSH_TEST_TAG=c.dir)
    marker = os.path.join(c.dir, "ran")
    for args in (["--hosts", ""], ["--hosts="], ["--hostfile", ""], ["--hostfile= "]):
        code, out, err = c.run_process([c.ddprun, *args, "--no-python", "touch", marker], env, 30)
        check(code == 2, f"{args}: exit 2, not {code}", out, err)
        first = err.strip().splitlines()[0] if err.strip() else ""
        check(re.match(r"^ddprun: error: --host(s|file): empty ", first) and
              len(err.strip().splitlines()) <= 2, f"{args}: one line naming the flag", err)
        check(not os.path.exists(marker), f"{args}: nothing ran", out, err)


if __name__ == "__main__":
    sys.exit(suite.main(sys.argv, SshHosts))
