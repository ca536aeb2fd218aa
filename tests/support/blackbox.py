"""blackbox.py: the one harness of the black-box suites that run the built binaries as
real processes (tests/integration, tests/multinode (etcd_test.py too), ssh, slurm): the
test registry and main() that ctest runs, check() and poll(), the interpreter choice,
workspaces (a temporary directory, processes started with timeouts and captured output,
ports reserved until the code under test binds them) and their cleanup.

A suite script builds a Suite, registers its test functions with suite.test and ends with
`sys.exit(suite.main(sys.argv, Workspace-class))`; ctest runs one test per process:

    <suite>.py <path to ddprun> <test name>
    <suite>.py - --list         (one line per test: NAME KIND; CMake registers from it)

KIND is `plain` (needs no torch), `torch` (the 1.13 tier only), `tiers` (torch, run on
every PyTorch tier: 1.13, 2.6 and 2.14) or `torch214` (the 2.14 tier only). The interpreter for workers and clients is
$DDPRUN_TEST_PYTHON (PYTHON_EXEC of the jobs): Debian 12's /usr/bin/python3 with PyTorch
1.13, or scripts/python-torch26 / scripts/python-torch214 for the newer tiers. A test
that needs torch exits 77 (ctest's SKIP_RETURN_CODE) when it has none.
Every wait is a poll with a generous deadline, never a fixed sleep that a slow 2-core
machine could outrun.
"""
import glob
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PYTHON = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
SKIP = 77
# What a launcher started from a test must not inherit from the caller's environment.
LAUNCHER_VARIABLES = ("PET_", "TORCHELASTIC_", "LOGLEVEL")


class Failed(Exception):
    pass


class Skip(Exception):
    pass


def _context(context):
    return "".join(f"\n--- {c() if callable(c) else c}" for c in context)


def check(cond, what, *context):
    """Fails the test with `what` and each context item (a callable is called) unless
    `cond` holds."""
    if not cond:
        raise Failed(what + _context(context))


def poll(pred, timeout, what, *context):
    """pred()'s first true value, polling every 50 ms; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    value = pred()
    if value:
        return value
    raise Failed(f"timed out after {timeout} s waiting for: {what}" + _context(context))


def read_text(path):
    """The file's text so far ("" when it does not exist yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def json_records(directory):
    """The JSON files in `directory` (sorted by name) that are complete; one still being
    written is left out."""
    out = []
    for f in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            with open(f) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            pass  # being written
    return out



def torch_version():
    """PYTHON's torch version, or None (and the reason on stdout) when it has none. Read
    from the installed package's metadata, not by importing torch: the import cost 2.7
    (1.13) to 4.3 (2.14) CPU-seconds, paid by every torch test before it started (a torch
    that is installed but cannot be imported fails the test, not skips it)."""
    r = subprocess.run([PYTHON, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        print(f"{PYTHON} has no torch package: {lines[-1] if lines else f'exit {r.returncode}'}")
        return None
    return r.stdout.strip()


def cpu_used(name):
    """One line: the CPU time of this test's harness and of the processes it waited for (the
    agents and, through them, their workers), for what CI's time is spent on
    (docs/architecture.md, CI). Also appended to $DDPRUN_TEST_CPU_LOG when set (scripts/test
    sums it), as `<script> <test> <worker interpreter> <user> <system>`."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = me.ru_utime + children.ru_utime, me.ru_stime + children.ru_stime
    log = os.environ.get("DDPRUN_TEST_CPU_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.path.basename(sys.argv[0])} {name} {os.path.basename(PYTHON)} "
                    f"{user:.2f} {system:.2f}\n")
    return f"cpu: {user + system:.1f} s (user {user:.1f}, system {system:.1f})"


def job_environment(drop=LAUNCHER_VARIABLES, **extra):
    """This process's environment without launcher variables (names starting with one of
    `drop`), with PYTHON_EXEC=PYTHON and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PYTHON_EXEC=PYTHON, **extra)
    return env


class Workspace:
    """A temporary directory and what a test starts in it: processes (killed at close(),
    with their session when they have their own) and reserved ports (released at
    close())."""

    def __init__(self, ddprun, prefix):
        self.ddprun = ddprun
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self._ports = []
        self._procs = []
        self._closed = False

    def reserve_port(self, host="127.0.0.1"):
        """A port number that stays ours until close(): bound with SO_REUSEADDR, never
        listening. Other processes' bind(0) and outgoing connections cannot get it, yet
        ddprun, PyTorch's TCPStore and libuv (which all set SO_REUSEADDR) can listen on
        it. Closing a probe socket before handing the number over would let another test
        take the port in between."""
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        self._ports.append(s)
        return s.getsockname()[1]

    def run_process(self, argv, env, timeout, text=True, cwd=None):
        """Runs argv to the end with captured output: (returncode, stdout, stderr). A run
        past `timeout` seconds is killed and fails the test, showing its output."""
        try:
            p = subprocess.run(argv, env=env, cwd=cwd or self.dir, capture_output=True,
                               text=text, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise Failed(f"{argv[0]} still running after {timeout} s: {argv}",
                         e.stdout, e.stderr) from None
        return p.returncode, p.stdout, p.stderr

    def start_process(self, argv, env, log=None, new_session=False, cwd=None):
        """Starts argv: stdout and stderr to the file `log` when given (read it while it
        runs), else to pipes (communicate() with a timeout). In a new session, close()
        kills its whole process group."""
        out = open(log, "w") if log else subprocess.PIPE
        try:
            p = subprocess.Popen(argv, env=env, cwd=cwd or self.dir, text=True,
                                 stdout=out,
                                 stderr=subprocess.STDOUT if log else subprocess.PIPE,
                                 start_new_session=new_session)
        finally:
            if log:
                out.close()
        self._procs.append((p, new_session))
        return p

    def close(self):
        """Kills what is still running, releases the ports, removes the directory.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        for p, own_session in self._procs:
            try:
                if own_session:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass
        for s in self._ports:
            s.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Suite:
    """The test functions of one suite script, and its main()."""

    def __init__(self, doc, needs_torch=False):
        self.doc = doc
        self.needs_torch = needs_torch  # the default of the suite's tests
        self.tests = {}

    def test(self, fn=None, *, needs_torch=None, every_tier=False, tiers=None, tier=None):
        """Registers a test function fn(workspace): `@suite.test`,
        `@suite.test(needs_torch=True)`, `@suite.test(every_tier=True)` for a torch
        test that also runs with PyTorch 2.6 and 2.14, `@suite.test(tiers=("113", "214"))`
        for one that runs with the oldest and the newest only (where 2.6 would repeat what
        they bracket), or `@suite.test(tier="214")` for one that runs with PyTorch 2.14
        only."""
        if every_tier:
            tiers = ("113", "26", "214")

        def register(f):
            torch = bool(tiers) or (self.needs_torch if needs_torch is None else needs_torch)
            kind = ("tiers " + " ".join(tiers) if tiers else f"torch{tier}" if tier
                    else "torch" if torch else "plain")
            self.tests[f.__name__] = (f, torch, kind)
            return f
        return register(fn) if fn is not None else register

    def main(self, argv, make_workspace):
        if len(argv) != 3:
            print(self.doc)
            return 2
        ddprun, name = argv[1], argv[2]
        if name == "--list":
            for test, (_, _, kind) in self.tests.items():
                print(test, kind)
            return 0
        if name not in self.tests:
            print(f"no test named {name!r}; --list lists them")
            return 2
        fn, needs_torch, _ = self.tests[name]
        if needs_torch and torch_version() is None:
            print(f"SKIP {name}: no torch in {PYTHON}")
            return SKIP
        ws = make_workspace(os.path.abspath(ddprun))
        try:
            fn(ws)
        except Failed as e:
            print(f"FAIL {name}: {e}")
            return 1
        except Skip as e:
            print(f"SKIP {name}: {e}")
            return SKIP
        finally:
            ws.close()
            print(cpu_used(name))
        print(f"PASS {name}")
        return 0
